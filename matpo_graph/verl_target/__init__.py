"""veRL 0.9.1 target: the MATPO agent loop, trainer mode, reward function and launcher.

Modules (each imported on demand; those marked * need veRL):

- ``agent_loop`` *  the AgentLoopBase subclass registered as ``matpo_graph``
- ``convert``    *  a scored rollout tree -> AgentLoopOutputs (descendants first, root last)
- ``policy``        the Policy protocol over veRL's LLM server client
- ``trainer``    *  trainer mode ``matpo``: fixed optimizer steps, tree_token_mean weights
- ``weights``       tree_token_mean as per-token weights under veRL's token-mean
- ``setup``         Ray worker setup hook that registers the trainer mode
- ``reward``        veRL's custom reward function for a compiled plan
- ``dataset``       QA items -> veRL's RL parquet
- ``launch``        ``matpo-graph train --engine verl``

The bundle itself is written by :mod:`matpo_graph.compilers.verl` (pure, no veRL needed).
"""

__all__: list[str] = []
