# Rescaled RoPE speeds (position interpolation, NTK-aware base, YaRN) against Hugging Face and first principles.
# Run: .venv/bin/python -m pytest tests/test_reference_extras.py
import math

import numpy as np
import pytest
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from tinylm import reference as ref

rng = np.random.default_rng(0)


def hf_inv_freq(rope_type: str, head_dim: int, base: float, factor: float, max_len: int, **kw) -> np.ndarray:
    extra = {"seq_len": kw.pop("_seq_len")} if "_seq_len" in kw else {}
    params = {"rope_type": rope_type, "rope_theta": base, "factor": factor, **kw}
    cfg = LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
                      max_position_embeddings=max_len, rope_parameters=params)
    return ROPE_INIT_FUNCTIONS[rope_type](cfg, "cpu", **extra)[0].double().numpy()


def test_plain_speeds_are_the_ones_rope_tables_uses():
    D = 12
    speeds = ref.rope_inv_freq(D, 500.0)
    np.testing.assert_allclose(speeds, [500.0 ** (-2 * i / D) for i in range(D // 2)], rtol=1e-14)
    cos, _ = ref.rope_tables(D, 4, 500.0)
    np.testing.assert_allclose(np.arccos(cos[1, : D // 2]), speeds, rtol=1e-9)  # angle at position 1


def test_rope_with_plain_speeds_equals_rope():
    x, pos = rng.normal(size=(2, 7, 16)), rng.integers(0, 3000, size=7)
    np.testing.assert_allclose(ref.rope_with_inv_freq(x, pos, ref.rope_inv_freq(16, 1e4)), ref.rope(x, pos), atol=1e-12)


def test_position_interpolation_maps_long_positions_onto_trained_ones():
    x, pos = rng.normal(size=(5, 8)), np.array([0, 4, 400, 1020, 4092])
    pi = ref.rope_with_inv_freq(x, pos, ref.rope_inv_freq(8, 1e4, "pi", factor=4.0))
    np.testing.assert_allclose(pi, ref.rope(x, pos // 4), atol=1e-12)
    np.testing.assert_allclose(ref.rope_inv_freq(64, 1e4, "pi", 4.0),
                               hf_inv_freq("linear", 64, 1e4, 4.0, 1024), rtol=1e-6)


@pytest.mark.parametrize("D", [8, 64, 96])
def test_ntk_base_slows_the_slowest_pair_by_factor_and_keeps_the_fastest(D):
    plain, ntk = ref.rope_inv_freq(D, 1e4), ref.rope_inv_freq(D, 1e4, "ntk", 8.0)
    assert ntk[0] == plain[0] == 1.0
    assert math.isclose(ntk[-1], plain[-1] / 8.0, rel_tol=1e-12)
    assert np.all(np.diff(ntk / plain) < 0)  # slower and slower towards the long wavelengths
    # Hugging Face's dynamic NTK at 8x the trained length with factor 1 is the same base change
    np.testing.assert_allclose(ntk, hf_inv_freq("dynamic", D, 1e4, 1.0, 1024, _seq_len=8 * 1024), rtol=1e-6)


@pytest.mark.parametrize("D,base,factor,L", [(64, 1e4, 4.0, 1024), (96, 1e4, 4.0, 1024), (128, 5e5, 8.0, 8192),
                                             (32, 1e6, 2.0, 256)])
def test_yarn_matches_hugging_face(D, base, factor, L):
    ours = ref.rope_inv_freq(D, base, "yarn", factor, original_max_len=L)
    theirs = hf_inv_freq("yarn", D, base, factor, int(factor * L), original_max_position_embeddings=L)
    np.testing.assert_allclose(ours, theirs, rtol=2e-6)


def test_yarn_keeps_fast_pairs_and_interpolates_slow_ones():
    D, L, s = 96, 1024, 4.0
    plain, yarn = ref.rope_inv_freq(D, 1e4), ref.rope_inv_freq(D, 1e4, "yarn", s, original_max_len=L)
    turns = L * plain / (2 * np.pi)                      # full turns of each pair within the trained length
    np.testing.assert_allclose(yarn[turns > 32], plain[turns > 32], rtol=1e-12)
    np.testing.assert_allclose(yarn[turns < 1], plain[turns < 1] / s, rtol=1e-12)
    assert np.all((yarn <= plain) & (yarn >= plain / s))


@pytest.mark.parametrize("kwargs,message", [
    (dict(head_dim=7), "head_dim"), (dict(head_dim=8, base=1.0), "base"), (dict(head_dim=8, scaling="linear"), "scaling"),
    (dict(head_dim=8, scaling="pi", factor=0.5), "factor"),
    (dict(head_dim=8, scaling="yarn", factor=2.0, beta_fast=1.0, beta_slow=2.0), "beta_slow"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ref.rope_inv_freq(**kwargs)


def test_rope_with_inv_freq_checks_the_shape():
    with pytest.raises(ValueError, match="inv_freq"):
        ref.rope_with_inv_freq(np.zeros((3, 8)), None, np.ones(3))
