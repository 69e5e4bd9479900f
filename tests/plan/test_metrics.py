"""contract/metrics.py: metric names and the looped `(loops=n)` suffix, built and parsed once."""

from __future__ import annotations

from olmoablate.plan import metrics as m


def test_names_are_olmo_core_s() -> None:
    assert m.CE_LOSS == "train/CE loss" and m.GRAD_NORM == "optim/total grad norm"
    assert m.lm_eval("c4_en") == "eval/lm/c4_en/CE loss"
    assert m.downstream("piqa_rc_0shot", "len_norm") == "eval/downstream/piqa_rc_0shot (len_norm)"
    assert m.h_norm(3) == "train/H norm (loop 3)" and m.h_norm_loop(m.h_norm(3)) == 3
    assert m.h_norm_loop(m.CE_LOSS) is None


def test_loops_suffix_round_trips() -> None:
    for base in (m.lm_eval("wiki"), m.downstream("arc (x)", "acc")):
        assert m.split_loops(m.with_loops(base, 8)) == (base, 8)
    assert m.split_loops(m.lm_eval("wiki")) == (m.lm_eval("wiki"), None)
    assert m.gate_metrics(["a"]) == {m.CE_LOSS, m.PPL, m.lm_eval("a"), m.lm_eval("a", "PPL")}
