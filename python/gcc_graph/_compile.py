"""gcc_graph.compile: a PyTorch program (an nn.Module with example inputs, an ExportedProgram, or a
saved .pt2) compiled by the gcc-graph command into a .so, cached, and opened."""
import hashlib
import os
import shutil
import subprocess
import tempfile

from ._model import Model


class CompileError(RuntimeError):
    """gcc-graph refused the program (its message names the node, op or file)."""


def compiler(path=None):
    """The gcc-graph command: path, else $GCC_GRAPH, else gcc-graph on PATH."""
    exe = path or os.environ.get("GCC_GRAPH") or shutil.which("gcc-graph")
    if not exe or not os.path.isfile(exe):
        raise FileNotFoundError("the gcc-graph command was not found: install it (make install), put it on PATH, "
                                "or set GCC_GRAPH=/path/to/gcc-graph")
    return os.path.abspath(exe)


def cache_dir():
    """Where compiled models are kept: $XDG_CACHE_HOME/gcc-graph/python (~/.cache/gcc-graph/python)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gcc-graph", "python")


def _flags(target, options):
    """compile's command-line options from keyword arguments: optimizer="adam" -> --optimizer adam,
    train=True -> --train, False and None left out, lists repeated."""
    out = ["--target", target]
    for k, v in options.items():
        flag = "--" + k.replace("_", "-")
        for x in (v if isinstance(v, (list, tuple)) else [v]):
            if x is None or x is False:
                continue
            out += [flag] if x is True else [flag, str(x)]
    return out


def _file_digest(path):
    """SHA-256 of a file, read in pieces (a .pt2 may hold gigabytes of weights)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.digest()


def _save(program, example_inputs, dynamic_shapes, directory):
    """The program as a .pt2 file: its own path, or torch.export's output saved into directory."""
    if isinstance(program, (str, bytes, os.PathLike)):
        p = os.fspath(program)
        if not os.path.isfile(p):
            raise FileNotFoundError(f"{p}: no such file (a .pt2 from torch.export.save, or a model.json)")
        return p
    import torch
    if isinstance(program, torch.nn.Module):
        if example_inputs is None:
            raise TypeError("compile(module, example_inputs): a torch.nn.Module needs example inputs to export it")
        args = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,)
        program = torch.export.export(program, args, dynamic_shapes=dynamic_shapes)
    elif not hasattr(program, "graph_module"):
        raise TypeError(f"compile() takes a torch.nn.Module, a torch.export.ExportedProgram or a .pt2 path, not {type(program).__name__}")
    p = os.path.join(directory, "model.pt2")
    torch.export.save(program, p)
    return p


def compile(program, example_inputs=None, *, target="cpu", output=None, dynamic_shapes=None, gcc_graph=None,
            cache=True, load=True, device=None, **options):
    """Compile a PyTorch program with gcc-graph and open it.

    program: a torch.nn.Module (exported here with torch.export.export(program, example_inputs,
    dynamic_shapes=...)), an ExportedProgram, or the path of a .pt2 file. target: "cpu" or "cuda".
    Keyword options are compile's: train=True, optimizer="adamw", lr=3e-4, precision="bf16",
    cflags="-O2", weights="external", ... (gcc-graph compile --help). output: where the .so goes;
    without it, a cache folder (cache_dir()) keyed by the program's bytes, the options and the
    compiler itself, so that compiling the same program again costs nothing (cache=False compiles
    anyway). Returns the opened gcc_graph.Model, or the .so's path with load=False."""
    exe = compiler(gcc_graph)
    flags = _flags(target, options)
    external = options.get("weights") == "external"
    with tempfile.TemporaryDirectory(prefix="gcc_graph_") as tmp:
        src = _save(program, example_inputs, dynamic_shapes, tmp)
        key = hashlib.sha256()
        for digest in (_file_digest(exe), _file_digest(src), hashlib.sha256("\0".join(flags).encode()).digest()):
            key.update(digest)
        so = os.path.abspath(output) if output else os.path.join(cache_dir(), key.hexdigest()[:40] + ".so")
        os.makedirs(os.path.dirname(so), exist_ok=True)
        fresh = output or not cache or not os.path.isfile(so)   # a cached .so is named by its key, and whole (os.replace)
        weights = os.path.abspath(src)
        if external and src.startswith(tmp):   # the weights stay in the .pt2: keep a copy beside the .so
            weights = (so[:-3] if so.endswith(".so") else so) + ".pt2"
            if fresh or not os.path.isfile(weights):
                shutil.copyfile(src, weights + ".tmp")
                os.replace(weights + ".tmp", weights)
        if fresh:
            part = f"{so}.{os.getpid()}.tmp"
            r = subprocess.run([exe, "compile", src, "-o", part] + flags, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if r.returncode:
                if os.path.exists(part):
                    os.unlink(part)
                raise CompileError(r.stderr.strip() or f"gcc-graph compile exited with status {r.returncode}")
            os.replace(part, so)   # whole or not at all, for another process reading the cache
    if not load:
        return so
    return Model(so, weights=weights if external else None, device=device)
