"""gensets: benchmark datasets of generated images, from prompt grid to the Hugging Face Hub."""

__version__ = "0.1.0"
