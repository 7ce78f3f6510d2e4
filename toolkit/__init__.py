"""toolkit: hybrid recurrent/attention language models from HF checkpoints to text on a CPU."""

__version__ = "0.1.0"
