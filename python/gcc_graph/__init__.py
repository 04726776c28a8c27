"""gcc-graph from Python: compile PyTorch programs ahead of time, and call the compiled models.

    import torch, torchvision, gcc_graph
    net = torchvision.models.resnet18().eval()
    model = gcc_graph.compile(net, (torch.randn(8, 3, 224, 224),), target="cpu")   # or "cuda"
    y = model(torch.randn(8, 3, 224, 224))            # torch in, torch out; NumPy in, NumPy out

    model = gcc_graph.load("model.so")                  # a .so from gcc-graph compile
    model.input_names, model.output_names, model.metadata
    logits = model(input_ids=ids, attention_mask=mask) # by name; one output comes back bare

    trainer = gcc_graph.compile(net_with_loss, (x, y), train=True, optimizer="adamw", lr=3e-4)
    loss = trainer.train_step(x, y)                     # forward, backward and update, one call
    trainer.learning_rate = 1e-4
    net_with_loss.load_state_dict(trainer.state_dict())

Pure Python over ctypes and DLPack: inputs are read in place and outputs written where the caller
gets them (torch tensors on the model's device; a CUDA model runs on torch's current stream). The
compile side runs the gcc-graph command ($GCC_GRAPH, or gcc-graph on PATH). docs/python.md has the
whole interface."""
from ._compile import CompileError, cache_dir, compile, compiler
from ._dlpack import DLDataType, DLDevice, DLTensor
from ._model import GuardError, Model, ModelError, load

__version__ = "0.1.0"
__all__ = ["compile", "load", "Model", "CompileError", "GuardError", "ModelError", "cache_dir", "compiler",
           "DLTensor", "DLDevice", "DLDataType", "__version__"]
