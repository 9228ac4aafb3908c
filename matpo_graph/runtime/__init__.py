"""The rollout runtime: runs a compiled graph over one shared policy into token-level rollout trees.

Modules (import them directly; this package imports nothing heavy):

- :mod:`.executor`: the recursive async :class:`~matpo_graph.runtime.executor.Executor`.
- :mod:`.context`, :mod:`.chat`: token-in/token-out contexts over the model's chat template.
- :mod:`.calls`: checking calls against a role's declared callables and their schemas.
- :mod:`.policy`: the Policy protocol; :mod:`.policies`: vllm, hf, openai and scripted backends.
- :mod:`.models`: local model folders, including the embedded SmolLM2 converted once and cached.
- :mod:`.tree_view`: a terminal drawing of a rollout tree.
"""

__all__: list[str] = []
