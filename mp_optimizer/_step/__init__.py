"""The training step: scale, check, gate, apply, update, signals.

Built by `LossScaleOptimizer` (`mp_optimizer.optimizer`); imports the
managers (`mp_optimizer.managers`) and the shared infrastructure
(`mp_optimizer._internal`), never a public face.
"""
