# Chapter 17's DPO-loss exercise, run from the chapter's own cells (its imports, its checker, its solution): the
# checker passes the solution and correct variants, refuses tinylm.dpo and each named bypass
# (tests/exercise_bypasses.py), and holds the loss to float32, 0-dim, finite at large margins and with the
# library's gradients. Run: .venv/bin/python -m pytest tests/test_exercise_ch17_dpo.py
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from exercise_bypasses import named
from test_exercises_08_13 import refused_as_library, run_cells

CHAPTER = "17_preferences.ipynb"


@pytest.fixture(scope="module")
def ns() -> dict:
    return run_cells(CHAPTER, "from tinylm.dpo import dpo_loss", "def _dpo_cases(rng)",
                     "def my_dpo_loss_log_of_sigmoid")


def test_the_solution_passes_every_time_and_the_chapters_wrong_answer_fails_at_the_far_case(ns):
    check = ns["check"]
    first = check(ns["my_dpo_loss"])
    assert first and repr(first) == repr(check(ns["my_dpo_loss"])), first    # the same verdict on every run
    wrong = check(ns["my_dpo_loss_log_of_sigmoid"])
    assert not wrong and f"case {len(ns['DPO_SIZES']) + 1}:" in wrong.message and "infinite" in wrong.message
    assert "F.logsigmoid" in wrong.message                                    # the hint


def test_the_cases_are_float32_pairs_and_the_last_is_far_from_the_reference(ns):
    for seed in range(20):
        cases = ns["_dpo_cases"](np.random.default_rng(seed))
        assert [len(c[0]) for c in cases] == [*ns["DPO_SIZES"], 4]
        for *logps, beta in cases:
            assert all(a.dtype == np.float32 and a.shape == logps[0].shape and (a < 0).all() for a in logps)
        assert all(beta in (0.05, 0.1, 0.2, 0.5) for *_, beta in cases[:-1])    # never 1: beta must be used
        pc, pr, rc, rr, beta = cases[-1]
        bh = beta * ((pc - rc) - (pr - rr))
        assert beta == 1.0 and (np.abs(bh) >= 149).all() and (np.abs(bh) <= 201).all()
        assert (bh < 0).sum() == 2 and (bh > 0).sum() == 2                    # both ways: each naive form fails


@pytest.mark.parametrize("form", ["softplus", "bce", "float64_inside", "grouped"])
def test_correct_forms_pass(ns, form):
    def softplus(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
        return F.softplus(-beta * ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected))).mean()

    def bce(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
        x = beta * (policy_chosen - ref_chosen - policy_rejected + ref_rejected)
        return F.binary_cross_entropy_with_logits(x, torch.ones_like(x))

    def float64_inside(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
        d = [t.double() for t in (policy_chosen, policy_rejected, ref_chosen, ref_rejected)]
        return -F.logsigmoid(beta * ((d[0] - d[2]) - (d[1] - d[3]))).mean().float()

    def grouped(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
        return -F.logsigmoid(beta * (policy_chosen - policy_rejected) - beta * (ref_chosen - ref_rejected)).mean()

    fn = locals()[form]
    assert ns["check"](fn), ns["check"](fn)


def test_every_named_bypass_of_the_chapter_is_refused(ns):
    found = named(ns, CHAPTER)
    assert len(found) >= 5
    for label, fn in found:
        verdict = ns["check"](fn)
        assert not verdict, (label, verdict)
        if label.startswith(("tinylms_dpo_loss", "reloaded_tinylm_dpo")):
            assert refused_as_library(verdict) and "tinylm.dpo" in verdict.message, (label, verdict)


def test_the_library_is_refused_however_it_is_reached(ns):
    import tinylm.dpo

    check = ns["check"]
    assert refused_as_library(check(lambda *a: tinylm.dpo.dpo_loss(*a)[0]))
    assert refused_as_library(check(lambda *a: tinylm.dpo.dpo_loss(*a, nll_coef=0.0)[0]))
    assert refused_as_library(check(tinylm.dpo.dpo_loss))            # the function itself as the answer


def test_a_loss_that_is_not_a_0dim_float32_tensor_with_the_librarys_gradient_fails(ns):
    check = ns["check"]

    def h(pc, pr, rc, rr):
        return (pc - rc) - (pr - rr)

    def in_float64(pc, pr, rc, rr, beta):
        return -F.logsigmoid(beta * h(pc, pr, rc, rr)).double().mean()

    def as_a_float(pc, pr, rc, rr, beta):
        return float(-F.logsigmoid(beta * h(pc, pr, rc, rr)).mean().detach())

    def one_element(pc, pr, rc, rr, beta):
        return -F.logsigmoid(beta * h(pc, pr, rc, rr)).mean().reshape(1)

    def right_value_no_gradient(pc, pr, rc, rr, beta):                   # the value, with a zero gradient
        return -F.logsigmoid(beta * h(pc, pr, rc, rr)).mean().detach() + 0 * (pc.sum() + pr.sum())

    def chosen_gradient_only(pc, pr, rc, rr, beta):                     # the rejected side cut off
        return -F.logsigmoid(beta * h(pc, pr.detach(), rc, rr)).mean()

    for fn, said in [(in_float64, "float32"), (as_a_float, "0-dim tensor, not float"),
                     (one_element, "not shape (1,)"), (right_value_no_gradient, "values differ"),
                     (chosen_gradient_only, "no gradient reaches")]:
        verdict = check(fn)
        assert not verdict and said in verdict.message, (fn.__name__, verdict)
    assert "not written yet" in check(lambda *a: (_ for _ in ()).throw(NotImplementedError)).message
