"""Framework process groups the fronts share: the ranks of one training joined in a
framework's own runtime, with det.core's object collectives on top.

- :mod:`det_sdk.collectives.torch`: ``torch.distributed`` (:class:`TorchDistributed`),
  the PyTorch front's (``det_sdk.pytorch``) and the Keras front's on Keras's torch backend;
- :mod:`det_sdk.collectives.jax`: ``jax.distributed`` (:class:`JaxDistributed`), the
  Keras front's on Keras's JAX backend.

Each is a :class:`det_sdk.core.DistributedContext` built from the ranks a launcher
describes (:mod:`det_sdk.ranks`: torchrun's or horovodrun's variables). Each module
imports its framework where it needs it (lazily, inside the functions that use it, so
that importing a module costs nothing); nothing here imports a front, the master or
the CLI (``[tool.importlinter]`` in pyproject.toml), so both fronts stand on it without
importing each other. The package itself imports none of its modules: ``import
det_sdk.collectives.jax`` is what loads the JAX side.

>>> import det_sdk.collectives.jax as jax_ranks
>>> jax_ranks.JaxDistributed(rank=0, size=1).size
1
"""
