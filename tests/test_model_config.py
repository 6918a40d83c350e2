"""config.json -> ModelConfig: presets, parameter and KV-cache counts, names, errors."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from rooflinesim.errors import UnknownName, UserError
from rooflinesim.models import presets
from rooflinesim.models.config import ModelConfig, from_hf_dict, load_config
from rooflinesim.ops import Gemm

PRESETS = presets.preset_names()


def raw(preset: str) -> dict:
    return json.loads(presets.preset_path(preset).read_text())


def from_raw(cfg: dict, name: str = "test") -> ModelConfig:
    return from_hf_dict(cfg, name=name)


def write(tmp_path, cfg, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(cfg) if not isinstance(cfg, str) else cfg)
    return path


def one_sentence(exc) -> str:
    msg = str(exc.value)
    assert msg and "\n" not in msg and "Traceback" not in msg
    return msg


# ------------------------------------------------------------------------------ presets


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_loads_and_is_consistent(name):
    cfg = load_config(name)
    assert cfg.name == name
    assert cfg.ignored_fields == ()  # every key of a shipped config is accounted for
    assert sum(cfg.param_counts().values()) == cfg.total_params()
    assert sum(cfg.layer_params(i) for i in range(cfg.num_layers)) == (
        cfg.total_params() - cfg.param_counts()["embedding"] - cfg.param_counts()["lm_head"]
        - cfg.hidden_size)  # the final norm
    assert cfg.active_params() <= cfg.total_params()
    entry = presets.preset_entry(name)
    assert cfg.hf_id == entry["hf_ids"][0]
    assert entry["source"] and entry["copied_from"]


def test_index_and_folder_agree():
    folder = presets.preset_path(PRESETS[0]).parent
    files = {p.name for p in folder.iterdir() if p.suffix == ".json" and p.name != "index.json"}
    assert files == {presets.preset_entry(n)["file"] for n in PRESETS}
    assert len(PRESETS) >= 21


# Published total parameter counts. Exact counts are the checkpoint's own: the parameter
# count the Hugging Face model page reads from the safetensors files; rounded ones are
# the model card's figure, checked to its rounding.
GOLDEN_TOTAL = [
    ("llama-2-7b", 6_738_415_616, 0),  # meta-llama/Llama-2-7b-hf safetensors
    ("llama-2-70b", 68_976_648_192, 0),  # meta-llama/Llama-2-70b-hf safetensors
    ("llama-3-8b", 8_030_261_248, 0),  # meta-llama/Meta-Llama-3-8B safetensors (8.03B)
    ("llama-3-70b", 70_553_706_496, 0),  # meta-llama/Meta-Llama-3-70B safetensors (70.6B)
    ("llama-3.1-8b", 8_030_261_248, 0),  # meta-llama/Llama-3.1-8B safetensors
    ("llama-3.1-70b", 70_553_706_496, 0),  # meta-llama/Llama-3.1-70B safetensors
    ("llama-3.1-405b", 405_853_388_800, 0),  # meta-llama/Llama-3.1-405B safetensors (406B)
    ("llama-3.3-70b", 70_553_706_496, 0),  # meta-llama/Llama-3.3-70B-Instruct safetensors
    ("mistral-7b-v0.1", 7_241_732_096, 0),  # mistralai/Mistral-7B-v0.1 safetensors (7.24B)
    ("mistral-7b-v0.3", 7_248_023_552, 0),  # mistralai/Mistral-7B-v0.3 safetensors (7.25B)
    ("mixtral-8x7b", 46_702_792_704, 0),  # mistralai/Mixtral-8x7B-v0.1 safetensors (46.7B)
    ("mixtral-8x22b", 141e9, 0.005),  # Mistral's Mixtral 8x22B announcement: 141B total
    ("qwen2-72b", 72.71e9, 0.0005),  # Qwen2 model card table: 72.71B
    ("qwen2.5-7b", 7_615_616_512, 0),  # Qwen/Qwen2.5-7B safetensors (model card: 7.61B)
    ("qwen2.5-72b", 72.7e9, 0.001),  # Qwen2.5-72B model card: 72.7B
    ("qwen3-30b-a3b", 30.5e9, 0.002),  # Qwen3-30B-A3B model card: 30.5B in total
    ("qwen3-235b-a22b", 235e9, 0.002),  # Qwen3-235B-A22B model card: 235B in total
    ("phi-3-mini-4k", 3_821_079_552, 0),  # microsoft/Phi-3-mini-4k-instruct safetensors (3.82B)
    ("phi-4", 14.7e9, 0.003),  # microsoft/phi-4 model page: 14.7B
    ("deepseek-v2-lite", 15.7e9, 0.003),  # DeepSeek-V2-Lite model card: 15.7B total
    # DeepSeek-V3 README_WEIGHTS.md: 671B main model, the MTP module apart; exact count of
    # the main-model tensors (embedding, 61 layers with e_score_correction_bias, norm, head)
    ("deepseek-v3", 671_026_419_200, 0),
]


@pytest.mark.parametrize("name,published,rel_tol", GOLDEN_TOTAL)
def test_total_params_match_published(name, published, rel_tol):
    total = load_config(name).total_params()
    if rel_tol == 0:
        assert total == published
    else:
        assert total == pytest.approx(published, rel=rel_tol)


GOLDEN_ACTIVE = [
    # DeepSeek-V3 README_WEIGHTS.md: 36.6B activated, including the 0.9B output head
    ("deepseek-v3", False, 36.6e9, 0.002),
    ("deepseek-v2-lite", False, 2.4e9, 0.03),  # DeepSeek-V2-Lite model card: 2.4B activated
    ("mixtral-8x7b", True, 12.9e9, 0.004),  # Mistral's Mixtral announcement: 12.9B active
    ("mixtral-8x22b", True, 39e9, 0.006),  # Mistral's Mixtral 8x22B announcement: 39B active
    ("qwen3-30b-a3b", True, 3.3e9, 0.02),  # Qwen3-30B-A3B model card: 3.3B activated
    ("qwen3-235b-a22b", True, 22e9, 0.02),  # Qwen3-235B-A22B model card: 22B activated
]


@pytest.mark.parametrize("name,with_embedding,published,rel_tol", GOLDEN_ACTIVE)
def test_active_params_match_published(name, with_embedding, published, rel_tol):
    assert load_config(name).active_params(include_embedding=with_embedding) == pytest.approx(
        published, rel=rel_tol)


def test_dense_model_activates_everything_but_the_embedding_table():
    cfg = load_config("llama-3-8b")
    assert cfg.active_params() == cfg.total_params() - 128256 * 4096
    assert cfg.active_params(include_embedding=True) == cfg.total_params()


def test_llama_3_8b_components():
    c = load_config("llama-3-8b").param_counts()
    h, v, i, layers = 4096, 128256, 14336, 32
    assert c["embedding"] == c["lm_head"] == v * h
    assert c["attention"] == layers * (2 * h * h + 2 * h * 1024)  # q, o: 32 heads; k, v: 8 heads of 128
    assert c["dense_mlp"] == layers * 3 * h * i  # gate, up, down
    assert c["norms"] == layers * 2 * h + h  # two RMSNorms per layer plus the final one
    assert c["router"] == c["routed_experts"] == c["shared_experts"] == 0


def test_qwen2_counts_its_qkv_bias():
    cfg = load_config("qwen2.5-7b")
    attn = cfg.attention_param_counts()
    assert attn["q_proj"] == 3584 * 3584 + 3584
    assert attn["k_proj"] == attn["v_proj"] == 3584 * 512 + 512
    assert attn["o_proj"] == 3584 * 3584  # no bias on o
    no_bias = from_raw({**raw("qwen2.5-7b"), "model_type": "mistral"})
    assert cfg.total_params() - no_bias.total_params() == 28 * (3584 + 2 * 512)


def test_mla_projections_and_latent_norms():
    cfg = load_config("deepseek-v3")
    assert cfg.is_mla and cfg.is_moe and cfg.qk_head_dim == 128 + 64
    attn = cfg.attention_param_counts()
    h = 7168
    assert attn == {
        "q_a_proj": h * 1536,
        "q_b_proj": 1536 * 128 * 192,
        "kv_a_proj": h * (512 + 64),  # latent plus the shared RoPE key
        "kv_b_proj": 512 * 128 * (128 + 128),
        "o_proj": 128 * 128 * h,
    }
    assert cfg.layer_norm_params() == 2 * h + 1536 + 512  # plus q_a_layernorm and kv_a_layernorm
    lite = load_config("deepseek-v2-lite")
    assert lite.q_lora_rank is None
    assert lite.attention_param_counts()["q_proj"] == 2048 * 16 * 192
    assert "q_a_proj" not in lite.attention_param_counts()
    assert lite.layer_norm_params() == 2 * 2048 + 512


def test_deepseek_layer_pattern_router_bias_and_mtp():
    cfg = load_config("deepseek-v3")
    assert cfg.dense_layers == [0, 1, 2] and len(cfg.moe_layers) == 58
    assert cfg.router_params() == 256 * 7168 + 256  # e_score_correction_bias with noaux_tc
    assert cfg.shared_expert_intermediate_size == 2048 and cfg.num_shared_experts == 1
    assert cfg.num_mtp_layers == 1
    # README_WEIGHTS.md: 11.5B unique MTP parameters, kept out of the 671B
    assert cfg.mtp_params() == pytest.approx(11.5e9, rel=0.015)
    # the checkpoint (main model, MTP module, and its copies of embedding and head): 685B
    v_h = 129280 * 7168
    assert cfg.total_params() + cfg.mtp_params() + 2 * v_h == pytest.approx(685e9, rel=0.002)
    lite = load_config("deepseek-v2-lite")
    assert lite.dense_layers == [0] and not lite.router_bias and lite.num_mtp_layers == 0
    assert lite.shared_expert_intermediate_size == 2 * 1408


def test_mixtral_and_qwen3_moe_layers():
    mix = load_config("mixtral-8x7b")
    assert mix.moe_layers == list(range(32)) and mix.intermediate_size == 0
    assert (mix.num_experts, mix.num_experts_per_tok, mix.moe_intermediate_size) == (8, 2, 14336)
    q3 = load_config("qwen3-30b-a3b")
    assert q3.moe_layers == list(range(48)) and q3.shared_expert_params() == 0
    assert q3.qk_norm and q3.layer_norm_params() == 2 * 2048 + 2 * 128
    assert q3.head_dim == 128 != q3.hidden_size // q3.num_heads  # head_dim comes from the config


def test_qwen_moe_sparse_step_and_mlp_only_layers():
    cfg = from_raw({
        "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "hidden_size": 256,
        "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 512, "vocab_size": 1000, "num_experts": 8, "num_experts_per_tok": 2,
        "moe_intermediate_size": 64, "shared_expert_intermediate_size": 128,
        "decoder_sparse_step": 2, "mlp_only_layers": [3]})
    assert cfg.layer_kinds == ("dense", "moe", "dense", "dense", "dense", "moe")
    assert cfg.shared_expert_params() == 3 * 256 * 128 + 256  # shared MLP and its gate
    assert cfg.param_counts()["dense_mlp"] == 4 * 3 * 256 * 512


def test_tied_embeddings_drop_the_lm_head():
    untied = load_config("llama-3-8b")
    tied = from_raw({**raw("llama-3-8b"), "tie_word_embeddings": True})
    assert tied.param_counts()["lm_head"] == 0
    assert untied.total_params() - tied.total_params() == 128256 * 4096
    assert tied.active_params() == untied.active_params()  # the head still multiplies


def test_sliding_windows_are_recorded():
    assert load_config("mistral-7b-v0.1").sliding_window == 4096
    assert load_config("phi-3-mini-4k").sliding_window == 2047
    assert load_config("mistral-7b-v0.3").sliding_window is None
    # Qwen writes sliding_window but only applies it with use_sliding_window
    assert load_config("qwen2.5-7b").sliding_window is None


def test_config_is_frozen():
    cfg = load_config("llama-3-8b")
    with pytest.raises(ValidationError):
        cfg.hidden_size = 1


# ----------------------------------------------------------------------------- KV cache


def test_kv_cache_bytes_per_token():
    llama = load_config("llama-3-70b")
    assert llama.kv_cache_bytes_per_token_per_layer(2) == 2 * 8 * 128 * 2
    assert llama.kv_cache_bytes_per_token(2) == 2 * 80 * 8 * 128 * 2 == 327_680
    assert llama.kv_cache_bytes_per_token("bf16") == 327_680
    assert llama.kv_cache_bytes_per_token("int4") == 327_680 / 4  # half a byte, not one
    ds = load_config("deepseek-v3")
    assert ds.kv_cache_bytes_per_token(2) == 61 * (512 + 64) * 2 == 70_272  # the MLA latent
    assert load_config("llama-2-7b").kv_cache_bytes_per_token("fp16") == 2 * 32 * 32 * 128 * 2
    with pytest.raises(UserError):
        llama.kv_cache_bytes_per_token(0)


# -------------------------------------------------------------------------------- names


@pytest.mark.parametrize("alias", [
    "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B", "llama-3.1-8b",
    "META-LLAMA/LLAMA-3.1-8B-INSTRUCT", "  Llama-3.1-8B  ", "meta-llama/Meta-Llama-3.1-8B-Instruct",
])
def test_aliases_resolve(alias):
    assert load_config(alias).name == "llama-3.1-8b"


def test_hf_id_records_the_variant_asked_for():
    assert load_config("meta-llama/llama-3.1-8b-instruct").hf_id == "meta-llama/Llama-3.1-8B-Instruct"
    assert load_config("llama-3.1-8b").hf_id == "meta-llama/Llama-3.1-8B"


def test_preset_ids_cover_every_hf_id_and_alias():
    ids = presets.preset_ids()
    for name in PRESETS:
        entry = presets.preset_entry(name)
        for alias in [name, *entry["hf_ids"], *entry["aliases"]]:
            assert ids[alias.lower()] == name


def test_unknown_name_suggests_close_ones():
    with pytest.raises(UnknownName) as exc:
        load_config("llama-3.1-9b")
    assert "did you mean" in one_sentence(exc) and "llama-3.1-8b" in str(exc.value)
    with pytest.raises(UnknownName) as exc:
        presets.preset_path("mixtral-8x9b")
    assert "mixtral-8x7b" in one_sentence(exc)


def test_missing_file_is_not_a_name_lookup(tmp_path):
    with pytest.raises(UserError) as exc:
        load_config(str(tmp_path / "nope" / "config.json"))
    assert "no such file" in one_sentence(exc)


# ----------------------------------------------------------------- files and directories


def test_file_and_directory_load(tmp_path):
    write(tmp_path, raw("qwen3-30b-a3b"))
    from_dir, from_file = load_config(tmp_path), load_config(tmp_path / "config.json")
    assert from_dir == from_file
    assert from_dir.total_params() == load_config("qwen3-30b-a3b").total_params()
    assert from_dir.name == tmp_path.name and from_dir.architecture == "Qwen3MoeForCausalLM"


def test_hub_cache_layout_gives_the_hf_id(tmp_path):
    snapshot = tmp_path / "models--Qwen--Qwen2.5-7B" / "snapshots" / "a09a3545"
    snapshot.mkdir(parents=True)
    write(snapshot, raw("qwen2.5-7b"))
    cfg = load_config(snapshot)
    assert cfg.name == cfg.hf_id == "Qwen/Qwen2.5-7B"


def test_directory_without_config(tmp_path):
    with pytest.raises(UserError) as exc:
        load_config(tmp_path)
    assert "no config.json" in one_sentence(exc)


def test_malformed_json_is_one_sentence(tmp_path):
    path = write(tmp_path, '{"model_type": "llama",\n  "hidden_size": 4096,,}')
    with pytest.raises(UserError) as exc:
        load_config(path)
    msg = one_sentence(exc)
    assert str(path) in msg and "not valid JSON at line 2" in msg


def test_top_level_must_be_an_object(tmp_path):
    with pytest.raises(UserError) as exc:
        load_config(write(tmp_path, "[1, 2]"))
    assert "JSON object" in one_sentence(exc)


def test_missing_required_field_names_file_and_field(tmp_path):
    cfg = raw("llama-3-8b")
    del cfg["num_hidden_layers"]
    path = write(tmp_path, cfg)
    with pytest.raises(UserError) as exc:
        load_config(path)
    msg = one_sentence(exc)
    assert str(path) in msg and "'num_hidden_layers'" in msg


def test_wrong_type_names_the_field(tmp_path):
    with pytest.raises(UserError) as exc:
        load_config(write(tmp_path, {**raw("llama-3-8b"), "hidden_size": "4096"}))
    assert "'hidden_size'" in one_sentence(exc)


def test_mla_requires_explicit_q_lora_rank():
    cfg = raw("deepseek-v2-lite")
    del cfg["q_lora_rank"]  # HF would silently default it to 1536
    with pytest.raises(UserError) as exc:
        from_raw(cfg)
    assert "'q_lora_rank'" in one_sentence(exc)


def test_inconsistent_heads_are_rejected():
    with pytest.raises(UserError) as exc:
        from_raw({**raw("llama-3-8b"), "num_key_value_heads": 5})
    assert "num_key_value_heads" in one_sentence(exc)


# --------------------------------------------------------- fields rooflinesim can't model


def test_unsupported_model_type_is_named():
    with pytest.raises(UserError) as exc:
        from_raw({"model_type": "mamba", "architectures": ["MambaForCausalLM"], "hidden_size": 768,
                  "num_hidden_layers": 24, "state_size": 16, "vocab_size": 50280})
    msg = one_sentence(exc)
    assert "model_type 'mamba'" in msg and "not supported" in msg


@pytest.mark.parametrize("key,value", [
    ("mamba_d_state", 16), ("linear_attn_config", {"kda_layers": [1]}), ("attention_type", "sparse"),
    ("hybrid_override_pattern", "M-M*"), ("index_topk", 2048),
])
def test_unmodelled_architecture_field_is_named(key, value):
    with pytest.raises(UserError) as exc:
        from_raw({**raw("llama-3-8b"), key: value})
    msg = one_sentence(exc)
    assert f"'{key}'" in msg and "cannot model" in msg


def test_layer_types_other_than_full_attention_are_rejected():
    cfg = raw("qwen3-30b-a3b")
    ok = from_raw({**cfg, "layer_types": ["full_attention"] * 48})
    assert ok.total_params() == load_config("qwen3-30b-a3b").total_params()
    with pytest.raises(UserError) as exc:
        from_raw({**cfg, "layer_types": ["sliding_attention", "full_attention"] * 24})
    assert "'layer_types'" in one_sentence(exc) and "sliding_attention" in str(exc.value)


def test_qwen_per_layer_sliding_window_is_rejected():
    with pytest.raises(UserError) as exc:
        from_raw({**raw("qwen2.5-7b"), "use_sliding_window": True})
    assert "'use_sliding_window'" in one_sentence(exc)


def test_encoder_decoder_is_rejected():
    with pytest.raises(UserError) as exc:
        from_raw({**raw("llama-3-8b"), "is_encoder_decoder": True})
    assert "'is_encoder_decoder'" in one_sentence(exc)


def test_unknown_harmless_fields_are_collected():
    cfg = from_raw({**raw("llama-3-8b"), "my_custom_note": "x", "num_local_experts": 8})
    # num_local_experts means nothing to a llama model (HF ignores it too): reported, not used
    assert cfg.ignored_fields == ("my_custom_note", "num_local_experts")
    assert not cfg.is_moe and cfg.total_params() == 8_030_261_248


# ------------------------------------------------------------------- properties (hypothesis)


def llama_dict(hidden_heads, kv_div, layers, inter, vocab, tied):
    heads, head_dim = hidden_heads
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": heads * head_dim, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": heads // kv_div,
            "intermediate_size": inter, "vocab_size": vocab, "tie_word_embeddings": tied}


heads_dims = st.tuples(st.sampled_from([1, 2, 4, 8, 16]), st.sampled_from([16, 32, 64, 128]))
llama_configs = st.builds(llama_dict, heads_dims, st.sampled_from([1, 2, 4]), st.integers(1, 8),
                          st.integers(1, 4096), st.integers(1, 50000), st.booleans()).filter(
    lambda d: d["num_key_value_heads"] >= 1 and d["num_attention_heads"] % d["num_key_value_heads"] == 0)


@given(llama_configs)
def test_components_add_up_and_layers_add_linearly(d):
    cfg = from_raw(d)
    assert sum(cfg.param_counts().values()) == cfg.total_params()
    deeper = from_raw({**d, "num_hidden_layers": d["num_hidden_layers"] + 1})
    assert deeper.total_params() - cfg.total_params() == cfg.layer_params(0)
    assert deeper.kv_cache_bytes_per_token(2) - cfg.kv_cache_bytes_per_token(2) == (
        cfg.kv_cache_bytes_per_token_per_layer(2))


@given(llama_configs)
def test_gqa_with_all_heads_is_mha(d):
    mha = from_raw({**d, "num_key_value_heads": d["num_attention_heads"]})
    h = d["hidden_size"]
    assert sum(mha.attention_param_counts().values()) == 4 * h * h
    assert mha.kv_cache_bytes_per_token_per_layer(1) == 2 * h
    gqa = from_raw(d)
    ratio = d["num_attention_heads"] // d["num_key_value_heads"]
    assert gqa.kv_cache_bytes_per_token(2) * ratio == mha.kv_cache_bytes_per_token(2)


@given(st.integers(1, 16), st.integers(1, 16), st.integers(1, 64))
def test_moe_active_params_grow_with_top_k(experts, top_k, layers):
    top_k = min(top_k, experts)
    cfg = from_raw({**raw("mixtral-8x7b"), "num_local_experts": experts,
                    "num_experts_per_tok": top_k, "num_hidden_layers": layers})
    dense_part = cfg.active_params() - layers * top_k * cfg.expert_params()
    embedding = cfg.param_counts()["embedding"]
    assert dense_part == cfg.total_params() - layers * experts * cfg.expert_params() - embedding
    if top_k == experts:  # every expert active: only the embedding table is left out
        assert cfg.active_params() == cfg.total_params() - cfg.param_counts()["embedding"]


def test_top_k_above_experts_is_rejected():
    with pytest.raises(UserError) as exc:
        from_raw({**raw("mixtral-8x7b"), "num_experts_per_tok": 9})
    assert "num_experts_per_tok" in one_sentence(exc)


# ------------------------------------------------------ quantization_config, size bounds

@pytest.mark.parametrize("quant, weights", [
    ({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}, "fp8"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, "int4"),
    ({"quant_method": "gptq", "bits": 8}, "int8"),
    ({"quant_method": "gptq"}, "int4"),  # GPTQ's default
    ({"quant_method": "bitsandbytes", "load_in_4bit": True}, None),
])
def test_quantization_config_gives_the_weights_default(quant, weights):
    cfg = from_hf_dict({**raw("llama-3-8b"), "quantization_config": quant}, name="q")
    assert cfg.quantized_weights == weights
    default, warning = cfg.weights_default()
    assert default == (weights or "bf16")
    assert (warning is None) == (weights is not None)
    if warning:
        assert "bitsandbytes" in warning and "ignored" in warning and "\n" not in warning


@pytest.mark.parametrize("block", [[128], [128, 0], "128x128", [128.0, 128], [True, 128]])
def test_a_malformed_weight_block_size_is_one_sentence(tmp_path, block):
    from helpers import run_cli

    path = write(tmp_path, {**raw("llama-3-8b"),
                            "quantization_config": {"quant_method": "fp8", "weight_block_size": block}})
    code, out, err = run_cli(["predict", "model", "--model", str(path), "--gpu", "h200"])
    assert code == 2 and "weight_block_size" in err and len(err.strip().splitlines()) == 1, err


def test_fp8_checkpoints_in_blocks_run_the_block_kernels():
    """A checkpoint whose fp8 weights are stored in 128 x 128 blocks (DeepSeek-V3) prices its
    Linear layers and experts through the block-scaled kernels; the same weights quantized
    by the engine (--weights fp8 on a bf16 checkpoint) keep the per-tensor kernels, and the
    LM head and the router stay bf16."""
    from rooflinesim.models.deploy import Deployment
    from rooflinesim.models.kernels import Phase, phase_kernels
    from rooflinesim.ops.gemm import BLOCK_GEMM
    from rooflinesim.ops.moe import BLOCK_MOE, MoE

    ph = Phase("prefill", batch=1, seq_q=512, seq_kv=512, sequences=1)
    ds = phase_kernels(load_config("deepseek-v3"), Deployment(tp=8, weights="fp8"), ph)
    gemms = {k.name: k.args for k in ds if k.cls is Gemm}
    assert gemms["o_proj"]["backend"] == BLOCK_GEMM and gemms["qkv_a_proj"]["backend"] == BLOCK_GEMM
    assert gemms["lm_head"]["backend"] == "" and gemms["lm_head"]["dtype"] == "bf16"
    experts = [k for k in ds if k.name == "moe_experts_gate_up"]
    assert experts and experts[0].args["backend"] == BLOCK_MOE
    assert all(k.args["backend"] == "" for k in ds if k.name == "moe_router")
    llama = phase_kernels(load_config("llama-3-8b"), Deployment(weights="fp8"), ph)
    assert all(k.args["backend"] == "" for k in llama if k.cls is Gemm)
    int8 = phase_kernels(load_config("deepseek-v3"), Deployment(tp=8, weights="int8"), ph)
    assert all(k.args.get("backend", "") == "" for k in int8 if k.cls is Gemm)
    assert MoE(tokens=8, hidden=64, ffn=32, experts=4, top_k=2).expert_backend == ""


def test_block_scaled_layers_quantize_their_activations_in_a_kernel_apart():
    """Each block-scaled GEMM of a layer is preceded by the kernel that quantizes its input
    per 1 x 128 group (m x k elements), as the engines run it; the fused MoE kernel reads
    tokens through the sorted ids (no dispatch copy) and quantizes its two inputs; the
    per-tensor and bf16 paths are as before."""
    from rooflinesim.models.deploy import Deployment
    from rooflinesim.models.kernels import Phase, phase_kernels
    from rooflinesim.ops.memory import Elementwise
    from rooflinesim.ops.moe import BLOCK_MOE, MoE

    ph = Phase("prefill", batch=1, seq_q=512, seq_kv=512, sequences=1)
    ds = phase_kernels(load_config("deepseek-v3"), Deployment(tp=8, weights="fp8"), ph)
    names = [k.name for k in ds]
    for k in ds:
        if k.cls is Gemm and k.args["backend"]:
            q = ds[names.index(k.name) - 1]
            assert q.name == f"{k.name}_quant" and q.cls is Elementwise and q.args["kind"] == "quant_fp8"
            assert q.args["elements"] == k.args["m"] * k.args["k"] * k.args["batch"] and q.where == k.where
    assert "lm_head_quant" not in names and "moe_router_quant" not in names
    assert "moe_dispatch" not in names and "moe_experts_quant_in" in names and "moe_experts_quant_mid" in names
    per_tensor = phase_kernels(load_config("llama-3-8b"), Deployment(weights="fp8"), ph)
    assert not any(k.name.endswith("_quant") for k in per_tensor)
    q = Elementwise(elements=128, kind="quant_fp8", dtype="bf16").work()
    assert abs(float(q.hbm_bytes) - (2 + 1 + 4 / 128) * 128) < 1e-9
    moe = dict(tokens=64, hidden=256, ffn=128, experts=8, top_k=2, eager=False)
    assert "dispatch" in [n for n, _, _ in MoE(**moe).kernel_args()]
    block = [n for n, _, _ in MoE(**moe, expert_backend=BLOCK_MOE).kernel_args()]
    assert "dispatch" not in block and block.index("experts_quant_in") < block.index("experts_gate_up")
    assert "dispatch" in [n for n, _, _ in MoE(**moe, expert_backend=BLOCK_MOE, ep=2).kernel_args()]



def test_16_bit_experts_under_an_engine_run_its_fused_moe_kernel():
    """Mixtral's bf16 experts under an engine: the fused MoE kernel (its own fit), reading the
    tokens through the sorted ids (no dispatch copy) and quantizing nothing; under
    transformers' kernels, or quantized by the engine to fp8, the dtype's grouped GEMM."""
    from rooflinesim.models.deploy import Deployment
    from rooflinesim.models.kernels import Phase, phase_kernels
    from rooflinesim.ops.moe import FUSED_MOE

    EXPERT_GEMMS = ("moe_experts_gate_up", "moe_experts_down")
    ph = Phase("prefill", batch=1, seq_q=512, seq_kv=512, sequences=1)
    mix = load_config("mixtral-8x7b")
    engine = phase_kernels(mix, Deployment(tp=2), ph)
    names = [k.name for k in engine]
    assert set(EXPERT_GEMMS) <= set(names)
    assert all(k.args["backend"] == FUSED_MOE for k in engine if k.name in EXPERT_GEMMS)
    assert "moe_dispatch" not in names and not any(n.endswith("_quant_in") for n in names)
    assert "moe_dispatch" in [k.name for k in phase_kernels(mix, Deployment(tp=2, ep=2), ph)]  # (sent rows)
    for d in (Deployment(tp=2, kernels="hf", hf_cache="dynamic"), Deployment(tp=2, weights="fp8")):
        other = phase_kernels(mix, d, ph)
        assert all(k.args["backend"] == "" for k in other if k.name in EXPERT_GEMMS), d


def test_deepseek_v3_preset_is_stored_in_fp8():
    assert load_config("deepseek-v3").weights_default() == ("fp8", None)
    assert load_config("llama-3-8b").weights_default() == ("bf16", None)


def test_fit_and_predict_take_the_configs_quantization_unless_told(tmp_path):
    from helpers import run_cli

    code, out, _ = run_cli(["fit", "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8"])
    assert code == 0 and "weights fp8" in out
    code, out, _ = run_cli(["fit", "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8",
                            "--weights", "bf16"])
    assert "weights bf16" in out
    path = write(tmp_path, {**raw("llama-3-8b"), "quantization_config": {"quant_method": "hqq"}})
    code, out, err = run_cli(["predict", "model", "--model", str(path), "--gpu", "h100"])
    assert code == 0 and err.startswith("warning:") and "hqq" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("key, value, bound", [
    ("num_hidden_layers", 1e9, "10,000"), ("hidden_size", 4096 * 10**6, "1,000,000"),
    ("vocab_size", 10**12, "10,000,000"), ("num_attention_heads", 10**9, "10,000,000"),
])
def test_sizes_are_bounded(key, value, bound):
    with pytest.raises(UserError, match=f"'{key}' must be at most {bound}"):
        from_hf_dict({**raw("llama-3-8b"), key: value}, name="huge")


def test_the_weights_line_says_when_fp8_is_stored_in_blocks():
    from helpers import run_cli

    code, out, _ = run_cli(["predict", "model", "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8"])
    assert code == 0 and "fp8 weights (128 x 128 blocks)," in out.splitlines()[0]
    code, out, _ = run_cli(["predict", "model", "--model", "llama-3-8b", "--gpu", "h200", "--weights", "fp8"])
    assert code == 0 and "fp8 weights," in out.splitlines()[0] and "blocks" not in out.splitlines()[0]
    code, out, _ = run_cli(["serve", "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--rate", "2",
                            "--num-prompts", "4", "--input-len", "64", "--output-len", "4", "--json"])
    assert code == 0 and json.loads(out)["weight_block_size"] == [128, 128]
