"""Side files real checkpoints ship next to the weights (converters must carry them over).

Example::

    side_files("deepseek_v3")["generation_config.json"]["eos_token_id"]   # 1
"""

from __future__ import annotations

_DEEPSEEK_TOKENS = {
    "bos_token": "<｜begin▁of▁sentence｜>",
    "eos_token": "<｜end▁of▁sentence｜>",
}


def _added_token(content: str) -> dict:
    """A special token as DeepSeek's tokenizer_config.json spells it, e.g. ``{"__type":
    "AddedToken", "content": "<｜end▁of▁sentence｜>", "lstrip": False, ...}``."""
    return {
        "__type": "AddedToken",
        "content": content,
        "lstrip": False,
        "normalized": True,
        "rstrip": False,
        "single_word": False,
    }


def _deepseek(temperature: float) -> dict[str, dict]:
    tok = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": _added_token(_DEEPSEEK_TOKENS["bos_token"]),
        "clean_up_tokenization_spaces": False,
        "eos_token": _added_token(_DEEPSEEK_TOKENS["eos_token"]),
        "legacy": True,
        "model_max_length": 131072,
        "pad_token": _added_token(_DEEPSEEK_TOKENS["eos_token"]),
        "sp_model_kwargs": {},
        "unk_token": None,
        "tokenizer_class": "LlamaTokenizerFast",
    }
    gen = {
        "_from_model_config": True,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "do_sample": True,
        "temperature": temperature,
        "top_p": 0.95,
        "transformers_version": "4.46.3",
    }
    return {"tokenizer_config.json": tok, "generation_config.json": gen}


def _qwen() -> dict[str, dict]:
    tok = {
        "add_prefix_space": False,
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 262144,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    gen = {
        "bos_token_id": 248044,
        "do_sample": True,
        "eos_token_id": [248046, 248044],
        "pad_token_id": 248044,
        "temperature": 0.6,
        "top_k": 20,
        "top_p": 0.95,
        "transformers_version": "4.57.0.dev0",
    }
    return {"tokenizer_config.json": tok, "generation_config.json": gen}


def side_files(family: str) -> dict[str, dict]:
    """``{file name: JSON content}`` of the tokenizer and generation configs of ``family``."""
    if family == "qwen3_5_moe":
        return _qwen()
    return _deepseek(1.0 if family == "deepseek_v4" else 0.6)
