"""Everything the validation rules share: the layout on disk, scanned headers, config, catalog.

Built once per run by ``load_context``; the rules only read it. Layout faults never abort
here: they are kept (index problems, per-file scans) for the structure rules to report. Only
input that is not a checkpoint at all (no such path, no safetensors) raises ``InputError``
(exit 2). Derived views that need other layers (resolved quant schemes, model facts) are
computed on first use and cached; when they cannot be built the dependent rules are skipped
with the reason (``Unavailable``).

Example::

    ctx = load_context(Path("out/"), ValidateOptions(scan_weights=True))
    ctx.counted_files      # ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors']
    ctx.catalog.tensors["model.layers.1.mlp.experts.0.gate_proj.weight"].dtype  # 'U8'
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from checkpoint_tool.catalog.catalog import INDEX_NAME, Catalog, TensorEntry
from checkpoint_tool.catalog.json_input import MAX_CONFIG_BYTES, MAX_INDEX_BYTES, read_json_file
from checkpoint_tool.catalog.paths import safe_relative
from checkpoint_tool.catalog.safetensors_format import PICKLE_SUFFIXES, FileHeader
from checkpoint_tool.errors import CkptError, InputError

if TYPE_CHECKING:
    from checkpoint_tool.model import ModelFacts
    from checkpoint_tool.quant.resolve import ResolvedCatalog

#: vLLM ``--load-format sharded_state`` file names (no index, per-rank parameter names)
SHARDED_STATE_PREFIXES = ("model-rank-", "model-pp-")


class Unavailable(Exception):
    """A rule cannot run here (missing input or an optional layer); the message says why."""


@dataclass(frozen=True)
class ValidateOptions:
    """What to check beyond the always-on rules."""

    scan_weights: bool = False
    manifest: Path | None = None
    write_manifest: bool = False
    expect_policy: Path | None = None
    deep: bool = False
    deep_layers: int = 2
    deep_tokens: int = 16
    strict: bool = False
    #: engine target of the ``engine_loads`` verdict (None: config.json ckpt.target, else the
    #: default target)
    target: str | None = None
    #: bytes read per chunk when streaming tensor data (scale and weight scans)
    chunk_bytes: int = 64 * 1024 * 1024


@dataclass
class IndexEntryProblem:
    tensor: str
    target: object
    rule: str  # "index_valid" | "index_paths"
    message: str


@dataclass
class ValidationContext:
    root: Path
    options: ValidateOptions
    single_file: str | None = None
    index_present: bool = False
    index: dict | None = None
    index_error: str | None = None
    #: tensor -> shard file for index entries that name a safe relative path
    weight_map: dict[str, str] = field(default_factory=dict)
    index_problems: list[IndexEntryProblem] = field(default_factory=list)
    #: files the index references (safe paths only), sorted
    referenced: list[str] = field(default_factory=list)
    #: ``*.safetensors`` found in the folder, sorted
    on_disk: list[str] = field(default_factory=list)
    #: scans of every existing file in ``referenced`` and ``on_disk``
    scans: dict[str, Any] = field(default_factory=dict)
    config: dict | None = None
    config_error: str | None = None
    hf_quant_config: dict | None = None
    hf_quant_error: str | None = None
    #: the server side of a remote source (hub, S3): ``root`` then holds header stubs only
    #: (``catalog.remote.stubs``) and tensor bytes are read through the store
    store: Any = None

    # ---- layout -----------------------------------------------------------------------

    @property
    def uses_index(self) -> bool:
        return self.index_present and self.index_error is None

    @property
    def counted_files(self) -> list[str]:
        """The shards a loader would read: the index's files that exist, else all on disk."""
        if self.single_file is not None:
            return [self.single_file]
        if self.uses_index:
            return [f for f in self.referenced if f in self.scans]
        return list(self.on_disk)

    @property
    def is_sharded_state(self) -> bool:
        """vLLM sharded-state output: per-rank files of engine parameter names, no index."""
        files = self.counted_files
        return (
            not self.index_present
            and bool(files)
            and all(f.startswith(SHARDED_STATE_PREFIXES) for f in files)
        )

    @cached_property
    def catalog(self) -> Catalog:
        """A header-only catalog of the counted files (index placement wins on duplicates)."""
        tensors: dict[str, TensorEntry] = {}
        headers: dict[str, FileHeader] = {}
        for rel in self.counted_files:
            scan = self.scans[rel]
            for name, th in scan.entries.items():
                if name in tensors and self.weight_map.get(name) != rel:
                    continue
                tensors[name] = TensorEntry(name, rel, th.dtype, th.shape, th.begin, th.end)
        return Catalog(
            root=self.root,
            tensors=dict(sorted(tensors.items())),
            files=self.counted_files,
            config=self.config,
            hf_quant_config=self.hf_quant_config,
            index=self.index if self.uses_index else None,
            source=self.store.source if self.store is not None else str(self.root),
            revision=self.store.revision if self.store is not None else None,
            headers=headers,
            store=self.store,
        )

    @property
    def lost_files(self) -> list[str]:
        """Referenced shards whose tensor names cannot be read: missing, or header unparsable."""
        return [
            rel for rel in self.referenced if rel not in self.scans or not self.scans[rel].parsed
        ]

    @cached_property
    def all_names(self) -> set[str]:
        """Every tensor name the checkpoint accounts for: those in the counted files (broken
        header entries included) and, for lost shards, the names the index gives them. A
        structure rule already reports a lost shard; completeness must not repeat it per tensor.
        """
        out: set[str] = set()
        for rel in self.counted_files:
            out |= self.scans[rel].names
        lost = set(self.lost_files)
        out |= {n for n, rel in self.weight_map.items() if rel in lost}
        return out

    @cached_property
    def unreadable(self) -> set[str]:
        """Names whose bytes must not be read (the structure rules report why)."""
        out: set[str] = set()
        for rel in self.counted_files:
            out |= self.scans[rel].unreadable
        return out

    # ---- derived views (other layers) -------------------------------------------------

    def require_config(self) -> dict:
        if self.config is None:
            raise Unavailable(self.config_error or "no config.json (see config_json)")
        return self.config

    @cached_property
    def _resolved(self) -> ResolvedCatalog | Unavailable | CkptError:
        try:
            from checkpoint_tool.quant.resolve import resolve_catalog
        except ImportError as exc:
            return Unavailable(f"quant scheme resolution is not available ({exc})")
        if self.hf_quant_error:
            return Unavailable(f"hf_quant_config.json is unreadable ({self.hf_quant_error})")
        try:
            return resolve_catalog(self.catalog)
        except CkptError as exc:
            return exc

    def resolve_error(self) -> CkptError | None:
        """The user-caused error that stopped resolution (unsupported or malformed config)."""
        r = self._resolved
        return r if isinstance(r, CkptError) else None

    def resolved(self) -> ResolvedCatalog:
        """``ResolvedCatalog`` of the counted files; ``Unavailable`` if it cannot be built."""
        self.require_config()
        r = self._resolved
        if isinstance(r, Unavailable):
            raise r
        if isinstance(r, CkptError):
            raise Unavailable("the quantization config cannot be resolved (see quant_config)")
        return r

    @cached_property
    def _facts(self) -> ModelFacts | Unavailable:
        try:
            from checkpoint_tool.model import model_facts
        except ImportError as exc:
            return Unavailable(f"model facts are not available ({exc})")
        try:
            shapes = {n: e.shape for n, e in self.catalog.tensors.items()}
            return model_facts(self.config or {}, set(self.all_names), tensor_shapes=shapes)
        except CkptError as exc:
            return Unavailable(f"config.json does not describe the model: {exc.message}")

    def facts(self) -> ModelFacts:
        """``ModelFacts`` from config.json and the tensor names; ``Unavailable`` otherwise."""
        self.require_config()
        f = self._facts
        if isinstance(f, Unavailable):
            raise f
        return f


def load_context(source: str | os.PathLike[str], options: ValidateOptions) -> ValidationContext:
    """Read the layout, index, configs and every shard header of ``source`` (a folder, one
    ``.safetensors`` file, or a hub repo id ``org/name`` / ``hf://org/name@rev``).

    Raises ``InputError`` only when ``source`` is not a checkpoint at all.
    """
    from checkpoint_tool.validate.scan import scan_file

    path = Path(source).expanduser()
    store = None
    if not path.exists():
        from checkpoint_tool.catalog.remote.stubs import remote_view

        remote = remote_view(str(source))  # hub / S3: header stubs, data via the store
        if remote is not None:
            path, store = remote
    if not path.exists():
        from checkpoint_tool.catalog.sources import resolve_source

        # a hub repo id is fetched (JSON + safetensors) into the hub cache; anything else
        # raises InputError naming the path
        root, single, _ = resolve_source(str(source), headers_only=True)
        path = root / single if single else root
    if path.is_file():
        if path.suffix != ".safetensors":
            raise InputError(f"{path}: not a .safetensors file or a checkpoint folder")
        ctx = ValidationContext(root=path.parent, options=options, single_file=path.name)
    else:
        ctx = ValidationContext(root=path, options=options, store=store)
    root = ctx.root
    ctx.config, ctx.config_error = _read_json(root / "config.json")
    if ctx.config is None and ctx.config_error is None:
        ctx.config_error = "config.json is missing; vLLM needs it next to the shards"
    elif ctx.config is not None:
        from checkpoint_tool.model.config_checks import check_config

        try:  # sizes out of range fail config_json, and nothing is built from them
            check_config(ctx.config)
        except InputError as exc:
            ctx.config, ctx.config_error = None, exc.message
    ctx.hf_quant_config, ctx.hf_quant_error = _read_json(root / "hf_quant_config.json")
    if ctx.single_file is None:
        ctx.on_disk = sorted(p.name for p in root.glob("*.safetensors") if p.is_file())
        if (root / INDEX_NAME).exists():
            ctx.index_present = True
            _read_index(ctx)
        if not ctx.on_disk and not ctx.referenced:
            pickles = sorted(p.name for p in root.iterdir() if p.suffix in PICKLE_SUFFIXES)
            hint = f" (only pickle weights: {', '.join(pickles[:3])})" if pickles else ""
            raise InputError(
                f"{root}: no *.safetensors files and no usable {INDEX_NAME}{hint}; "
                "give a safetensors checkpoint folder"
            )
    named = [ctx.single_file] if ctx.single_file is not None else []
    files = sorted({*ctx.referenced, *ctx.on_disk, *named})
    for rel in files:
        if (root / rel).is_file():
            ctx.scans[rel] = scan_file(root, rel)
    return ctx


def _read_json(path: Path) -> tuple[dict | None, str | None]:
    if not path.exists():
        return None, None
    limit = MAX_INDEX_BYTES if path.name == INDEX_NAME else MAX_CONFIG_BYTES
    try:
        doc = read_json_file(path, limit)
    except InputError as exc:
        return None, f"{path.name}: {str(exc).removeprefix(f'{path}: ')}"
    if not isinstance(doc, dict):
        return None, f"{path.name} is not a JSON object"
    return doc, None


def _read_index(ctx: ValidationContext) -> None:
    doc, err = _read_json(ctx.root / INDEX_NAME)
    if err:
        ctx.index_error = err
        return
    ctx.index = doc
    weight_map = (doc or {}).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        ctx.index_error = f"{INDEX_NAME} has no 'weight_map' object"
        return
    files: set[str] = set()
    for name, rel in weight_map.items():
        safe = safe_relative(rel)
        if not isinstance(rel, str) or not rel:
            ctx.index_problems.append(
                IndexEntryProblem(name, rel, "index_valid", f"file entry {rel!r} is not a name")
            )
        elif safe is None:
            ctx.index_problems.append(
                IndexEntryProblem(
                    name,
                    rel,
                    "index_paths",
                    f"index points at {rel!r}, outside the checkpoint folder; loaders must "
                    "refuse it: fix the index",
                )
            )
        else:
            ctx.weight_map[name] = safe
            files.add(safe)
    ctx.referenced = sorted(files)
