"""Checks on loader-judge snapshots (``checkpoint_tool.vllm_run.judge``): parameter bytes of
ckpt's output against those vLLM builds from the source, padding, per-slot write counts.

A parameter is held as bytes shaped ``[*shape, itemsize]``, so slicing leading dimensions
slices elements whatever the dtype (packed FP4 stays packed: its shape is vLLM's uint8 one).

Example::

    same_parameters(out.ranks[0], src.ranks[0])   # raises AssertionError naming the tensor
    written_once(out.ranks[0])
"""

from __future__ import annotations

#: parameters whose output dimension holds [gate; up] (each half padded on its own)
MERGED = ("w13_", "gate_up_proj")
#: dtypes of scale tensors: their padding may hold any finite scale (the codes there are 0)
SCALE_WORDS = ("scale",)


def _merged_dim(name: str, ndim: int) -> int | None:
    if "w13_" in name:
        return 1 if ndim >= 3 else None  # [E, 2I, ...] (+ itemsize)
    if "gate_up_proj" in name:
        return 0 if ndim >= 2 else None  # [2I, ...]
    return None


def _embedded(name: str, out, src):  # type: ignore[no-untyped-def]
    """(the region of ``out`` that holds ``src``, out with that region cleared) for a
    padded parameter: each differing dimension keeps ``src``'s extent at its start (the
    [gate; up] dimension of a merged parameter: at the start of each half)."""
    import torch

    assert out.dim() == src.dim(), f"{name}: rank {tuple(out.shape)} vs {tuple(src.shape)}"
    merged = _merged_dim(name, out.dim())
    region = torch.zeros(out.shape, dtype=torch.bool)
    halves = [(0, 0)]
    if merged is not None and out.shape[merged] != src.shape[merged]:
        assert out.shape[merged] % 2 == 0 and src.shape[merged] % 2 == 0, name
        halves = [(0, 0), (out.shape[merged] // 2, src.shape[merged] // 2)]
    pieces = []
    for out_start, src_start in halves:
        idx_out, idx_src = [], []
        for d in range(out.dim()):
            size = src.shape[d] // len(halves) if d == merged and len(halves) == 2 else src.shape[d]
            assert size <= out.shape[d], f"{name}: dim {d} of the output is smaller"
            o0 = out_start if d == merged else 0
            s0 = src_start if d == merged else 0
            idx_out.append(slice(o0, o0 + size))
            idx_src.append(slice(s0, s0 + size))
        region[tuple(idx_out)] = True
        pieces.append((out[tuple(idx_out)], src[tuple(idx_src)]))
    return pieces, out[~region]


def same_parameters(out, src, *, what: str = "") -> int:  # type: ignore[no-untyped-def]
    """Every parameter of ``out`` equals the one of ``src`` byte for byte (a padded one: in
    the source's region, with zero codes around it; its scales there finite). Returns the
    number of parameters compared."""
    import torch

    assert sorted(out.params) == sorted(src.params), (
        f"{what}: parameter names differ: only in the output "
        f"{sorted(set(out.params) - set(src.params))[:5]}, only in the source "
        f"{sorted(set(src.params) - set(out.params))[:5]}"
    )
    for name, a in out.params.items():
        b = src.params[name]
        assert out.dtypes[name] == src.dtypes[name], f"{what}: {name} dtype"
        if a.shape == b.shape:
            assert torch.equal(a, b), f"{what}: {name} differs from the source's"
            continue
        pieces, rest = _embedded(name, a, b)
        for got, want in pieces:
            assert torch.equal(got, want), f"{what}: {name} (padded) differs in the source region"
        if any(w in name for w in SCALE_WORDS):
            assert _finite_scales(rest, out.dtypes[name]), f"{what}: {name} pads with NaN scales"
        else:
            assert not rest.any(), f"{what}: {name}: padded region is not zero"
    return len(out.params)


def _finite_scales(raw, dtype: str) -> bool:  # type: ignore[no-untyped-def]
    """No NaN / Inf among the scale bytes ``raw`` (flattened bytes of ``dtype`` elements)."""
    import torch

    if dtype in ("uint8", "float8_e8m0fnu"):  # E8M0: 0xFF is NaN
        return not bool((raw == 0xFF).any())
    elem = {"float8_e4m3fn": torch.float8_e4m3fn, "float32": torch.float32,
            "bfloat16": torch.bfloat16}[dtype]  # fmt: skip
    values = raw.reshape(-1).contiguous().view(elem).float()
    return bool(torch.isfinite(values).all())


def written_once(rank, reference=None) -> int:  # type: ignore[no-untyped-def]
    """vLLM's loader wrote each (parameter, shard) once, every expert slot of every MoE
    layer once per shard (w1, w3 of w13_*; w2 of w2_*), and (``reference``: the source's
    load) exactly the parameters it writes from the source. Returns the expert slots checked."""
    twice = {k: n for k, n in rank.writes.items() if n != 1}
    assert not twice, f"written more than once: {sorted(twice.items(), key=str)[:5]}"
    written = {k[0] for k in rank.writes}
    if reference is not None:
        theirs = {k[0] for k in reference.writes}
        assert written == theirs, (
            f"written only from the output {sorted(written - theirs)[:5]}, only from the "
            f"source {sorted(theirs - written)[:5]}"
        )
    slots = 0
    for prefix, info in rank.moe.items():
        n = info["local_num_experts"]
        for name in rank.params:
            if not name.startswith(prefix + "."):
                continue
            leaf = name.rsplit(".", 1)[1]
            shards = ("w1", "w3") if leaf.startswith("w13_") else ("w2",)
            got = {(k[1], k[2]) for k in rank.writes if k[0] == name}
            want = {(s, e) for s in shards for e in range(n)}
            assert got == want, (
                f"{name}: expert slots not written: {sorted(want - got, key=str)[:6]}; "
                f"unexpected: {sorted(got - want, key=str)[:6]}"
            )
            slots += n
    assert slots > 0, "no MoE parameter was loaded"
    return slots


def _partition(name: str, meta: dict, ndim: int) -> tuple[int | None, bool]:
    """(the dimension vLLM splits across TP ranks or None, whether it holds [gate; up]), from
    the layer kind the plugin read off vLLM's classes (``split``); ``ndim`` counts the
    itemsize dimension."""
    kind = meta.get("split")
    leaf = name.rsplit(".", 1)[1]
    if kind == "moe":
        if ndim < 4:  # per-expert scalars [E] / [E, 2]: whole on every rank
            return None, False
        return (1, True) if leaf.startswith("w13_") else (2, False)
    if kind in ("column", "merged_column", "vocab"):
        dim = meta.get("output_dim")
        if ndim <= 2 or dim is None:  # per-tensor scalars / 1-D: whole (or per shard)
            return (0, kind == "merged_column") if ndim == 2 and kind == "vocab" else (None, False)
        return int(dim), kind == "merged_column"
    if kind == "row":
        dim = meta.get("input_dim")
        return (int(dim), False) if ndim > 2 and dim is not None else (None, False)
    if kind == "replicated" or (kind == "other" and "mla_attn" in name):
        return None, False
    if kind == "other" and leaf in (
        "k_scale",
        "v_scale",
        "q_scale",
        "prob_scale",
        "k_zero_point",
        "v_zero_point",
        "q_zero_point",
    ):
        # KV-cache / attention scales (compressed-tensors' CompressedTensorsKVCacheMethod):
        # one scalar per attention layer, whole on every rank
        return None, False
    if kind == "other" and leaf == "attn_sink":
        # DeepSeek-V4: one sink per attention head, split by head (head_rank_start:end in
        # models/deepseek_v4/cpu/model.py load_weights)
        return (0, False) if ndim == 2 else (None, False)
    if kind == "other" and (leaf.startswith("hc_") or leaf == "ape"):
        # DeepSeek-V4's hyper-connection mixers and compressor position embeddings: plain
        # parameters of the decoder layer / compressor, whole on every rank
        return None, False
    raise AssertionError(f"{name}: no TP rule for a parameter of {meta.get('module')} ({kind})")


def resliced_parameters(out, full, rank: int, tp: int, *, what: str = "") -> int:  # type: ignore[no-untyped-def]
    """``out`` (TP rank ``rank`` of ``tp``) holds what vLLM loaded at TP 1 (``full``), split
    the way vLLM splits it (``_partition``) after zero padding at the end of each [gate; up]
    half or dimension; elsewhere zero codes, finite scales. For a source vLLM refuses at
    this TP, and for padded outputs (ckpt pads the whole intermediate, then vLLM slices)."""
    import torch

    assert sorted(out.params) == sorted(full.params), (
        f"{what}: parameter names differ: only in the output "
        f"{sorted(set(out.params) - set(full.params))[:5]}, only at TP 1 "
        f"{sorted(set(full.params) - set(out.params))[:5]}"
    )
    for name, a in out.params.items():
        b = full.params[name]
        assert out.dtypes[name] == full.dtypes[name], f"{what}: {name} dtype"
        if out.meta[name].get("module") == "QKVParallelLinear":
            # q, k, v are unequal parts (GQA) whose sizes the snapshot does not record: not
            # resliced here; unpadded cells compare them rank by rank with vLLM's own TP load
            continue
        assert a.dim() == b.dim(), f"{what}: {name} rank"
        dim, merged = _partition(name, out.meta[name], a.dim())
        halves = 2 if merged else 1
        region = torch.zeros(a.shape, dtype=torch.bool)
        for h in range(halves):
            idx_a, idx_b = [], []
            for d in range(a.dim()):
                if d == dim:
                    per = a.shape[d] // halves  # this rank's share of one half
                    real = b.shape[d] // halves  # the source's rows of that half
                    lo = rank * per
                    n = max(0, min(per, real - lo))
                    idx_a.append(slice(h * per, h * per + n))
                    idx_b.append(slice(h * real + lo, h * real + lo + n))
                else:
                    n = b.shape[d] if d != dim else 0
                    assert n <= a.shape[d], f"{what}: {name} dim {d} smaller than the source's"
                    idx_a.append(slice(0, n))
                    idx_b.append(slice(0, n))
            region[tuple(idx_a)] = True
            assert torch.equal(a[tuple(idx_a)], b[tuple(idx_b)]), (
                f"{what}: {name} differs from the TP 1 load resliced (rank {rank}, half {h})"
            )
        rest = a[~region]
        if any(w in name for w in SCALE_WORDS):
            assert _finite_scales(rest, out.dtypes[name]), f"{what}: {name} pads with NaN scales"
        else:
            assert not rest.any(), f"{what}: {name}: padded region is not zero (rank {rank})"
    return len(out.params)


def refold_shared(rank, n_routed: int):  # type: ignore[no-untyped-def]
    """The snapshot an FSE load should give, built from an *unfused* load of the same
    source: each MoE layer's shared MLP (``shared_experts.gate_up_proj.*`` /
    ``down_proj.*``, vLLM's own TP slicing) appended as expert slot ``n_routed`` of
    ``w13_*`` / ``w2_*`` (one shared expert). For sources whose online FSE redirection
    crashes in vLLM; ``test_refold_equals_vllms_own_redirection`` checks it against that
    redirection where it runs."""
    import copy

    import torch

    out = copy.copy(rank)
    params, dtypes = dict(rank.params), dict(rank.dtypes)
    for prefix in rank.moe:
        mlp = prefix.split(".experts")[0]
        for name in [n for n in params if n.startswith(prefix + ".")]:
            leaf = name.rsplit(".", 1)[1]
            proj, rest = (
                ("gate_up_proj", leaf[4:]) if leaf.startswith("w13_") else ("down_proj", leaf[3:])
            )
            shared = f"{mlp}.shared_experts.{proj}.{rest}"
            routed = params[name]
            assert routed.shape[0] == n_routed, f"{name}: {routed.shape[0]} slots"
            extra = params.pop(shared)
            if extra.numel() == 2 * routed[0].numel() and leaf == "w13_input_scale":
                # per-tensor FP8: one w13 input scale per expert, written by w1 then w3 into
                # the same slot; the shared MLP keeps gate's and up's. Equal here, or the
                # slot's value would depend on the loading order
                assert torch.equal(extra[0], extra[1]), f"{shared}: gate and up input scales differ"
                extra = extra[:1]
            extra = extra.reshape(1, *routed.shape[1:])
            dtypes.pop(shared)
            params[name] = torch.cat([routed, extra])
    assert not [n for n in params if ".shared_experts." in n], "shared parameters left over"
    out.params, out.dtypes = params, dtypes
    return out


def written_once_whole(out, src) -> None:  # type: ignore[no-untyped-def]
    """Each parameter written once, and the same ones as from the source. gpt-oss's loader
    writes each 3-D expert parameter whole (``shard_id=None, expert_id=None``), so the
    per-expert slot counts of ``judge_checks.written_once`` do not apply."""
    twice = {k: n for k, n in out.writes.items() if n != 1}
    assert not twice, f"written more than once: {sorted(twice.items(), key=str)[:5]}"
    assert {k[0] for k in out.writes} == {k[0] for k in src.writes}
    experts = [k for k in out.writes if ".routed_experts." in k[0]]
    assert experts and all(k[1:] == (None, None) for k in experts)
