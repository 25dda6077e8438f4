"""Export of codistill checkpoints to PyTorch (TorchScript), ONNX and safetensors.

checkpoint.py reads a checkpoint with h5py, models.py rebuilds its model in PyTorch
(one function per model kind), writers.py writes the formats; scripts/export_model.py is
the command line.
"""
