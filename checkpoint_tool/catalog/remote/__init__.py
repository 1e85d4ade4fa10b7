"""Remote checkpoints: hub repos (``hf://org/name@rev``) and object stores (``s3://bucket/key``).

``open.open_remote`` builds a header-only ``Catalog`` from ranged reads (config, index and the
header bytes of each shard, nothing else); ``store.Store`` is the reader the executor uses
for tensor bytes (parallel ranged reads, retries, ETag pinning). See docs/remote.md.
"""
