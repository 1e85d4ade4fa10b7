"""A checkpoint's MoE layers read by tensor name, as an engine reads them: the runtime's input.

- ``view``: what every checkpoint view shares (config.json facts, routing, ``Router``);
- ``loader``: ``CheckpointView``, runtime layer weights read from a checkpoint by name;
- ``inputs``: seeded activations and the routing of them through a layer's router.

``verify`` compares two such views; ``requant.error`` measures a requantization on one.

Example::

    view = CheckpointView.open("/out/model", semantics="vllm")
    loaded = view.layer(3, experts=[5, 17, 200])
"""
