"""Suite-wide settings."""

import os

# Imported up front: importing hypothesis for the first time after the vLLM engine has run can trip
# CPython 3.11's AST recursion check inside pytest's assertion rewriter.
import hypothesis  # noqa: F401

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
