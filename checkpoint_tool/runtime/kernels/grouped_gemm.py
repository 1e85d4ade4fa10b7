"""One Triton grouped-GEMM kernel family for MoE experts, with in-kernel weight decoding.

``out[r, n] = sum_k A[r // ROW_DIV, k] * W[e(r), n, k]`` for every row ``r`` of the aligned
routing (``align.py``): each program takes one block of ``BLOCK_M`` rows of one expert and
``BLOCK_N`` output columns (and one split of K when split-K is on). ``FMT`` picks how W is
decoded inside the K loop:

- ``BF16``: weights as stored (bf16/f16/f32, cast to the dot dtype);
- ``FP8`` (weight-only): e4m3 -> bf16, the per-(row-block, K-block) f32 scale multiplies each
  K-step's partial product;
- ``FP8_W8A8``: e4m3 x e4m3 dot, times activation scale ``[row]`` and weight scale ``[col]``
  per K-step (activations are quantized in torch per 128-column group);
- ``INT4`` (compressed-tensors symmetric, W4A16): int32 words of eight nibbles (value ``j`` in
  bits ``4j..4j+3``, stored as ``q + 8``), ``(nibble - 8) x`` the group scale (f32
  ``[N, K/GROUP]``); ``BLOCK_K`` is a multiple of ``GROUP``;
- ``MXFP4`` / ``NVFP4``: packed nibbles decoded with bit operations (code -> fp16 bits ->
  f32 x scale x 2^14), E8M0 group scale (32) or E4M3 group scale (16) and, for NVFP4, the
  per-expert global scale applied to the accumulator. Low nibbles (even K) and high nibbles
  (odd K) are decoded two codes per 32-bit operation and meet the even and odd activation
  columns (split from one contiguous activation tile) in two dots.

``GATED`` computes gate and up tiles of the same rows and writes ``silu(gate) * up``
(``CLAMP``: DeepSeek-V4's ``swiglu_limit`` first, gate ``<= limit``, up in ``[-limit, limit]``,
as vLLM's ``SiluAndMulWithClamp``);
``APPLY_TOPK`` multiplies by the router weight of each row (the down projection's epilogue).
With ``PARTIAL`` (split-K over ``split_k`` programs) raw partial sums go to a float32 buffer
``[split_k, R, N (x2)]`` that the launcher reduces in a fixed order (deterministic; no atomics).

Under the Triton interpreter (CPU; ``TRITON_INTERPRET=1`` when triton is imported, see
``kernels/__init__.py``) the launcher sets ``DOT_DTYPE`` to float32: bf16 dots and bf16 arithmetic are wrong
there, so everything is upcast to float32 (on GPU bf16 stays).
"""

from __future__ import annotations

import triton
import triton.language as tl

FMT_BF16: tl.constexpr = tl.constexpr(0)
FMT_FP8: tl.constexpr = tl.constexpr(1)
FMT_W8A8: tl.constexpr = tl.constexpr(2)
FMT_MXFP4: tl.constexpr = tl.constexpr(3)
FMT_NVFP4: tl.constexpr = tl.constexpr(4)
FMT_INT4: tl.constexpr = tl.constexpr(5)


def _fp4_tile_py(
    words,
    scale,
    IS_MX: tl.constexpr,
    BF16_LANES: tl.constexpr,
    NG: tl.constexpr,
    GB: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
):
    """Packed FP4 ``[BN, NG, GB/4]`` int32 words + group scales ``[BN, NG]`` -> the weights of
    the even K columns (low nibbles) and of the odd ones (high nibbles), each ``[NG * GB, BN]``.

    Each 32-bit operation decodes two codes into two 16-bit lanes. A code ``(s, e1 e0 m)`` put
    in the bits (sign, exponent low bits, mantissa high bit) of a 16-bit float is the e2m1 value
    times a power of two, for every code (the e2m1 subnormal 0.5 lands on a subnormal):

    - ``BF16_LANES`` (GPU fast path): bf16 lanes are ``value * 2^-126``; times ``2^126`` then
      the group scale (E8M0 as bf16 bits, E4M3 -> bf16): exact bf16 products;
    - otherwise: fp16 lanes are ``value * 2^-14``, upcast to float32, times ``2^14 * scale``
      (exact too; the interpreter's bf16 emulation flushes bf16 subnormals, fp16 is safe).
    """
    w = words.to(tl.uint32, bitcast=True)
    t01 = (w & 0xFF) | ((w & 0xFF00) << 8)  # bytes 0, 1 in the two 16-bit lanes
    t23 = ((w >> 16) & 0xFF) | ((w >> 8) & 0xFF0000)  # bytes 2, 3
    if BF16_LANES:
        MAG: tl.constexpr = 6  # e1 e0 m -> bf16 bits 8..6
    else:
        MAG: tl.constexpr = 9  # -> fp16 bits 11..9
    lo01 = ((t01 & 0x00070007) << MAG) | ((t01 & 0x00080008) << 12)
    hi01 = ((t01 & 0x00700070) << (MAG - 4)) | ((t01 & 0x00800080) << 8)
    lo23 = ((t23 & 0x00070007) << MAG) | ((t23 & 0x00080008) << 12)
    hi23 = ((t23 & 0x00700070) << (MAG - 4)) | ((t23 & 0x00800080) << 8)
    if BF16_LANES:
        if IS_MX:
            s = (scale.to(tl.uint16) << 7).to(tl.bfloat16, bitcast=True)
        else:
            s = scale.to(tl.float8e4nv, bitcast=True).to(tl.bfloat16)
        s = s[:, :, None]
        c = tl.full((BLOCK_N, NG, GB), 2.0**126, tl.bfloat16)
        lo = _fp4_bytes(lo01, lo23, tl.bfloat16) * c * s
        hi = _fp4_bytes(hi01, hi23, tl.bfloat16) * c * s
    else:
        if IS_MX:
            s = (scale.to(tl.uint32) << 23).to(tl.float32, bitcast=True)
        else:
            s = scale.to(tl.float8e4nv, bitcast=True).to(tl.float32)
        s = (s * 16384.0)[:, :, None]
        lo = _fp4_bytes(lo01, lo23, tl.float16).to(tl.float32) * s
        hi = _fp4_bytes(hi01, hi23, tl.float16).to(tl.float32) * s
    lo = tl.trans(tl.reshape(lo, (BLOCK_N, NG * GB))).to(DOT_DTYPE)
    hi = tl.trans(tl.reshape(hi, (BLOCK_N, NG * GB))).to(DOT_DTYPE)
    return lo, hi


def _fp4_bytes_py(x01, x23, LANE: tl.constexpr):
    """Lanes (byte 0, byte 1) and (byte 2, byte 3) of words ``[BN, NG, GW]`` -> ``LANE``
    values ``[BN, NG, 4 * GW]`` in byte order."""
    b0 = (x01 & 0xFFFF).to(tl.uint16).to(LANE, bitcast=True)
    b1 = (x01 >> 16).to(tl.uint16).to(LANE, bitcast=True)
    b2 = (x23 & 0xFFFF).to(tl.uint16).to(LANE, bitcast=True)
    b3 = (x23 >> 16).to(tl.uint16).to(LANE, bitcast=True)
    # join appends a dim: join(join(b0, b2), join(b1, b3)) is [..., pair, lane], byte 2p + l
    x = tl.join(tl.join(b0, b2), tl.join(b1, b3))
    return tl.reshape(x, (x.shape[0], x.shape[1], x.shape[2] * 4))


_fp4_bytes = triton.jit(_fp4_bytes_py)


_fp4_tile = triton.jit(_fp4_tile_py)


def _int4_tile_py(
    words,
    scale,
    NG: tl.constexpr,
    GROUP: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
):
    """INT4 words ``[BN, KW]`` (eight values each) + group scales ``[BN, NG]`` -> the weight
    tile ``[NG * GROUP, BN]``: ``(nibble - 8) * scale``, exact in float32."""
    shifts = tl.arange(0, 8) * 4
    q = ((words[:, :, None] >> shifts[None, None, :]) & 0xF).to(tl.float32) - 8.0
    w = tl.reshape(q, (BLOCK_N, NG, GROUP)) * scale.to(tl.float32)[:, :, None]
    return tl.trans(tl.reshape(w, (BLOCK_N, NG * GROUP))).to(DOT_DTYPE)


_int4_tile = triton.jit(_int4_tile_py)


def _moe_gemm_py(
    a_ptr,
    a_scale_ptr,
    w_ptr,
    ws_ptr,
    wg_ptr,
    u_ptr,
    us_ptr,
    ug_ptr,
    out_ptr,
    topk_w_ptr,
    sorted_rows_ptr,
    block_expert_ptr,
    num_rows,
    N,
    K,
    stride_am,
    stride_ak,
    stride_asm,
    stride_ask,
    stride_we,
    stride_wn,
    stride_wk,
    stride_se,
    stride_sn,
    stride_sk,
    stride_os,
    stride_om,
    stride_on,
    swiglu_limit,
    ROW_DIV: tl.constexpr,
    FMT: tl.constexpr,
    GATED: tl.constexpr,
    CLAMP: tl.constexpr,
    APPLY_TOPK: tl.constexpr,
    HAS_GLOBAL: tl.constexpr,
    SBN: tl.constexpr,
    SBK: tl.constexpr,
    AGROUP: tl.constexpr,
    split_k,
    PARTIAL: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP: tl.constexpr,
    FP4_BF16: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
):
    pid_m = tl.program_id(0).to(tl.int64)
    pid_n = tl.program_id(1).to(tl.int64)
    pid_k = tl.program_id(2).to(tl.int64)
    expert = tl.load(block_expert_ptr + pid_m)
    if expert < 0:
        return
    expert = expert.to(tl.int64)

    # int64 offsets: no overflow for big stacks, and no per-op overflow checks in the interpreter
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M).to(tl.int64)
    rows = tl.load(sorted_rows_ptr + offs_m).to(tl.int64)
    row_ok = rows < num_rows
    a_rows = rows // ROW_DIV
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N).to(tl.int64)
    n_ok = offs_n < N

    k_tiles = (K + BLOCK_K - 1) // BLOCK_K
    tiles_per_split = (k_tiles + split_k - 1) // split_k
    kt_start = pid_k * tiles_per_split
    kt_end = tl.minimum(kt_start + tiles_per_split, k_tiles)
    k_first = kt_start * BLOCK_K

    a_base = a_ptr + a_rows[:, None] * stride_am
    w_base = w_ptr + expert * stride_we
    u_base = u_ptr + expert * stride_we
    ws_base = ws_ptr + expert * stride_se
    us_base = us_ptr + expert * stride_se

    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if FMT == FMT_MXFP4 or FMT == FMT_NVFP4:
        GB: tl.constexpr = GROUP // 2
        GW: tl.constexpr = GB // 4
        NG: tl.constexpr = BLOCK_K // GROUP
        KW: tl.constexpr = BLOCK_K // 8
        offs_k = tl.arange(0, BLOCK_K).to(tl.int64)
        a_ptrs = a_base + (k_first + offs_k)[None, :] * stride_ak
        # weights: int32 words [BLOCK_N, KW] (8 codes each, loaded 16 bytes at a time and viewed
        # as [BLOCK_N, NG, GW] groups); group scales [BLOCK_N, NG]
        g_rel = tl.arange(0, NG).to(tl.int64)
        kw = tl.arange(0, KW).to(tl.int64)
        w_off = offs_n[:, None] * stride_wn + (k_first // 8 + kw)[None, :] * stride_wk
        s_off = offs_n[:, None] * stride_sn + (k_first // GROUP + g_rel)[None, :] * stride_sk
        w_ptrs = w_base + w_off
        u_ptrs = u_base + w_off
        s_ptrs = ws_base + s_off
        t_ptrs = us_base + s_off
        for kt in range(kt_start, kt_end):
            k_left = K - kt * BLOCK_K
            if EVEN_K:
                a_mask = row_ok[:, None]
                w_mask = n_ok[:, None]
                s_mask = n_ok[:, None]
            else:
                a_mask = row_ok[:, None] & (offs_k < k_left)[None, :]
                w_mask = n_ok[:, None] & (8 * kw < k_left)[None, :]
                s_mask = n_ok[:, None] & (g_rel * GROUP < k_left)[None, :]
            a = tl.load(a_ptrs, mask=a_mask, other=0.0).to(DOT_DTYPE)
            # even K columns meet the low nibbles, odd ones the high nibbles
            a_even, a_odd = tl.split(tl.reshape(a, (BLOCK_M, BLOCK_K // 2, 2)))
            lo, hi = _fp4_tile(
                tl.reshape(tl.load(w_ptrs, mask=w_mask, other=0), (BLOCK_N, NG, GW)),
                tl.load(s_ptrs, mask=s_mask, other=0),
                FMT == FMT_MXFP4,
                FP4_BF16,
                NG,
                GB,
                BLOCK_N,
                DOT_DTYPE,
            )
            acc_g = tl.dot(a_even, lo, acc_g)
            acc_g = tl.dot(a_odd, hi, acc_g)
            if GATED:
                lo, hi = _fp4_tile(
                    tl.reshape(tl.load(u_ptrs, mask=w_mask, other=0), (BLOCK_N, NG, GW)),
                    tl.load(t_ptrs, mask=s_mask, other=0),
                    FMT == FMT_MXFP4,
                    FP4_BF16,
                    NG,
                    GB,
                    BLOCK_N,
                    DOT_DTYPE,
                )
                acc_u = tl.dot(a_even, lo, acc_u)
                acc_u = tl.dot(a_odd, hi, acc_u)
            a_ptrs += BLOCK_K * stride_ak
            w_ptrs += KW * stride_wk
            u_ptrs += KW * stride_wk
            s_ptrs += NG * stride_sk
            t_ptrs += NG * stride_sk
    elif FMT == FMT_INT4:
        NGI: tl.constexpr = BLOCK_K // GROUP
        KWI: tl.constexpr = BLOCK_K // 8
        offs_k = tl.arange(0, BLOCK_K).to(tl.int64)
        a_ptrs = a_base + (k_first + offs_k)[None, :] * stride_ak
        g_rel = tl.arange(0, NGI).to(tl.int64)
        kw = tl.arange(0, KWI).to(tl.int64)
        w_off = offs_n[:, None] * stride_wn + (k_first // 8 + kw)[None, :] * stride_wk
        s_off = offs_n[:, None] * stride_sn + (k_first // GROUP + g_rel)[None, :] * stride_sk
        w_ptrs = w_base + w_off
        u_ptrs = u_base + w_off
        s_ptrs = ws_base + s_off
        t_ptrs = us_base + s_off
        for kt in range(kt_start, kt_end):
            k_left = K - kt * BLOCK_K
            a_mask = row_ok[:, None] & (offs_k < k_left)[None, :]
            w_mask = n_ok[:, None] & (8 * kw < k_left)[None, :]
            s_mask = n_ok[:, None] & (g_rel * GROUP < k_left)[None, :]
            a = tl.load(a_ptrs, mask=a_mask, other=0.0).to(DOT_DTYPE)
            w = _int4_tile(
                tl.load(w_ptrs, mask=w_mask, other=0),
                tl.load(s_ptrs, mask=s_mask, other=0.0),
                NGI,
                GROUP,
                BLOCK_N,
                DOT_DTYPE,
            )
            acc_g = tl.dot(a, w, acc_g)
            if GATED:
                u = _int4_tile(
                    tl.load(u_ptrs, mask=w_mask, other=0),
                    tl.load(t_ptrs, mask=s_mask, other=0.0),
                    NGI,
                    GROUP,
                    BLOCK_N,
                    DOT_DTYPE,
                )
                acc_u = tl.dot(a, u, acc_u)
            a_ptrs += BLOCK_K * stride_ak
            w_ptrs += KWI * stride_wk
            u_ptrs += KWI * stride_wk
            s_ptrs += NGI * stride_sk
            t_ptrs += NGI * stride_sk
    else:
        offs_k = tl.arange(0, BLOCK_K).to(tl.int64)
        a_ptrs = a_base + (k_first + offs_k)[None, :] * stride_ak
        w_off = offs_n[None, :] * stride_wn + (k_first + offs_k)[:, None] * stride_wk
        w_ptrs = w_base + w_off
        u_ptrs = u_base + w_off
        s_row = (offs_n // SBN) * stride_sn
        for kt in range(kt_start, kt_end):
            k_left = K - kt * BLOCK_K
            if EVEN_K:
                a_mask = row_ok[:, None]
                w_mask = n_ok[None, :]
            else:
                a_mask = row_ok[:, None] & (offs_k < k_left)[None, :]
                w_mask = n_ok[None, :] & (offs_k < k_left)[:, None]
            a = tl.load(a_ptrs, mask=a_mask, other=0.0)
            w = tl.load(w_ptrs, mask=w_mask, other=0.0)
            if GATED:
                u = tl.load(u_ptrs, mask=w_mask, other=0.0)
            if FMT == FMT_BF16:
                a = a.to(DOT_DTYPE)
                acc_g = tl.dot(a, w.to(DOT_DTYPE), acc_g)
                if GATED:
                    acc_u = tl.dot(a, u.to(DOT_DTYPE), acc_u)
            else:
                s_off = s_row + ((kt * BLOCK_K) // SBK) * stride_sk
                ws = tl.load(ws_base + s_off, mask=n_ok, other=0.0)
                if GATED:
                    us = tl.load(us_base + s_off, mask=n_ok, other=0.0)
                if FMT == FMT_W8A8:
                    a_s = tl.load(
                        a_scale_ptr + a_rows * stride_asm + ((kt * BLOCK_K) // AGROUP) * stride_ask,
                        mask=row_ok,
                        other=0.0,
                    )
                    if DOT_DTYPE == tl.float32:
                        a = a.to(tl.float32)
                        w = w.to(tl.float32)
                        if GATED:
                            u = u.to(tl.float32)
                    acc_g += tl.dot(a, w) * a_s[:, None] * ws[None, :]
                    if GATED:
                        acc_u += tl.dot(a, u) * a_s[:, None] * us[None, :]
                else:
                    a = a.to(DOT_DTYPE)
                    acc_g += tl.dot(a, w.to(DOT_DTYPE)) * ws[None, :]
                    if GATED:
                        acc_u += tl.dot(a, u.to(DOT_DTYPE)) * us[None, :]
            a_ptrs += BLOCK_K * stride_ak
            w_ptrs += BLOCK_K * stride_wk
            u_ptrs += BLOCK_K * stride_wk

    if HAS_GLOBAL:
        acc_g = acc_g * tl.load(wg_ptr + expert)
        if GATED:
            acc_u = acc_u * tl.load(ug_ptr + expert)
    if APPLY_TOPK:
        tw = tl.load(topk_w_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
        acc_g = acc_g * tw[:, None]
    out_off = rows[:, None] * stride_om + offs_n[None, :] * stride_on
    out_mask = row_ok[:, None] & n_ok[None, :]
    if PARTIAL:
        out_base = out_ptr + pid_k * stride_os
        tl.store(out_base + out_off, acc_g, mask=out_mask)
        if GATED:
            tl.store(out_base + N * stride_on + out_off, acc_u, mask=out_mask)
    else:
        if GATED:
            if CLAMP:
                acc_g = tl.minimum(acc_g, swiglu_limit)
                acc_u = tl.minimum(tl.maximum(acc_u, -swiglu_limit), swiglu_limit)
            acc_g = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u
        tl.store(out_ptr + out_off, acc_g.to(out_ptr.dtype.element_ty), mask=out_mask)


moe_gemm_kernel = triton.jit(_moe_gemm_py)

#: True when triton was imported with TRITON_INTERPRET=1 (CPU tensors, float32 dots)
INTERPRETED = type(moe_gemm_kernel).__name__ == "InterpretedFunction"
