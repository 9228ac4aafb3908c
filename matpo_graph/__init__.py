"""matpo-graph: declarative multi-agent graphs compiled to MATPO reinforcement learning.

Importing the package is cheap: no torch, vllm or verl. Engines load lazily where used.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
