"""One conversion spread over many processes or machines, with the same bytes as one host.

- ``parts``: array-job parts (``ckpt convert SRC DST --part I/N``, then ``--finalize``): a
  deterministic size-balanced split of the output files, one part record per part in DST.
- ``ray_pool``: each output file a Ray task (``ckpt convert ... --executor ray``).

Both write each weight file with the single-host code (``execute.runner.FileRun.write_only``)
and the index and manifest with ``execute.runner.finish_output``, so any split gives the same
files and the same ``ckpt-manifest.json`` as one host.
"""
