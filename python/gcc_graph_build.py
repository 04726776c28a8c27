"""A PEP 517 build backend with the standard library only, so that `pip install ./python` works
offline (no setuptools to download into pip's isolated build environment). It builds the pure-Python
wheel of the gcc_graph package (and an sdist, and an editable wheel for `pip install -e`). The name
and version come from pyproject.toml."""
import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "gcc_graph"


def _project():
    text = open(os.path.join(HERE, "pyproject.toml"), encoding="utf-8").read()
    project = text.split("[project]", 1)[1]

    def field(name):
        m = re.search(r'^%s\s*=\s*"([^"]*)"' % re.escape(name), project, re.M)
        return m.group(1) if m else ""
    return field("name"), field("version"), field("description"), field("requires-python")


def _metadata():
    name, version, summary, python = _project()
    return (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: {summary}\n"
            f"Requires-Python: {python}\nProvides-Extra: numpy\nProvides-Extra: torch\n"
            f"Requires-Dist: numpy; extra == \"numpy\"\nRequires-Dist: torch; extra == \"torch\"\n")


def _dist_name():
    name, version = _project()[:2]
    return name.replace("-", "_"), version


def _sources():
    """(path in the wheel, bytes) of the package's .py files."""
    out = []
    for f in sorted(os.listdir(os.path.join(HERE, PACKAGE))):
        if f.endswith(".py"):
            out.append((f"{PACKAGE}/{f}", open(os.path.join(HERE, PACKAGE, f), "rb").read()))
    return out


def _wheel(directory, files):
    name, version = _dist_name()
    info = f"{name}-{version}.dist-info"
    files = files + [(f"{info}/METADATA", _metadata().encode()),
                     (f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: gcc_graph_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n")]
    record = []
    whl = f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, whl), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files:
            z.writestr(zipfile.ZipInfo(path, (2026, 1, 1, 0, 0, 0)), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(data)}")
        record.append(f"{info}/RECORD,,")
        z.writestr(zipfile.ZipInfo(f"{info}/RECORD", (2026, 1, 1, 0, 0, 0)), "\n".join(record) + "\n")
    return whl


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, _sources())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """pip install -e ./python: a .pth file that puts this folder on sys.path."""
    return _wheel(wheel_directory, [("gcc_graph_editable.pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    name, version = _dist_name()
    base = f"{name}-{version}"
    tgz = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, tgz), "w:gz") as t:
        def add(path, data):
            ti = tarfile.TarInfo(f"{base}/{path}")
            ti.size, ti.mtime = len(data), 1767225600
            t.addfile(ti, io.BytesIO(data))
        add("PKG-INFO", _metadata().encode())
        for f in ("pyproject.toml", "gcc_graph_build.py"):
            add(f, open(os.path.join(HERE, f), "rb").read())
        for path, data in _sources():
            add(path, data)
    return tgz
