"""The mismatch metrics have one registry (``nbkit.records.metrics``): the computed keys, the aliases, the trainer's
logged
keys, the schema's row keys and the headline lists all come from it; every stored study card says which version of
the definitions its rows were computed under, and cards older than the field still load."""

from __future__ import annotations

import numpy as np
import pytest

from nbkit import results
from nbkit.mismatch import mismatch
from nbkit.records import metrics, schema


def _ragged(seed=0):
    rng = np.random.default_rng(seed)
    mu = [rng.normal(-1.0, 0.3, n) for n in (3, 5, 4)]
    return [m + rng.normal(0, 0.05, m.size) for m in mu], mu


def test_mismatch_metrics_returns_exactly_the_registered_keys_and_aliases_in_order():
    pi, mu = _ragged()
    out = mismatch.mismatch_metrics(pi, mu)
    assert list(out)[: len(metrics.MISMATCH)] == list(metrics.MISMATCH)
    assert list(out)[len(metrics.MISMATCH) :] == list(metrics.aliases())
    assert all(out[alias] == out[key] for alias, key in metrics.aliases().items())
    assert mismatch.METRICS == metrics.meanings() and mismatch.ALIASES == metrics.aliases()


def test_the_trainer_logs_what_the_registry_marks_and_the_schema_documents_each_row_key():
    from nbkit.rl.trainer import MISMATCH_KEYS

    assert MISMATCH_KEYS == metrics.logged() and len(set(MISMATCH_KEYS)) == len(MISMATCH_KEYS)
    for name in MISMATCH_KEYS:
        assert name in metrics.MISMATCH or name in metrics.aliases(), name
        assert schema.mismatch_key(name) in schema.KEYS, name
    assert {schema.KL_K1, schema.KL_K3, schema.SEQ_KL, schema.ESS_TOKEN, schema.PPL_RATIO} <= set(schema.KEYS)


def test_the_headline_lists_are_the_registrys():
    from nbkit.offline import anatomy, ladder

    assert ladder.HEADLINE_KEYS == anatomy.METRICS == metrics.headline()
    assert tuple(mismatch.HEADLINE) == metrics.ci() and set(metrics.headline()) <= set(metrics.ci())
    pi, mu = _ragged(1)
    full = mismatch.mismatch_metrics(pi, mu)
    for key, fn in mismatch.HEADLINE.items():  # the bootstrap's fast estimators are the metrics themselves
        assert float(fn(pi, mu)) == pytest.approx(full[key], rel=1e-12), key


def test_a_metric_can_log_only_its_key_or_its_aliases_and_names_are_unique():
    with pytest.raises(ValueError, match="logs \\['kl'\\], neither its key nor one of its aliases"):
        metrics.Metric("x", "a metric", aliases=("y",), logged=("kl",))
    with pytest.raises(ValueError, match="registered already"):
        metrics.register(metrics.Metric("kl_k1", "again"))
    with pytest.raises(ValueError, match="registered already"):
        metrics.register(metrics.Metric("new_one", "its alias is taken", aliases=("kl_sample_train_v1",)))


def test_a_registered_metric_no_part_computes_is_refused_by_name(monkeypatch):
    monkeypatch.setitem(metrics.MISMATCH, "made_up", metrics.Metric("made_up", "computed nowhere"))
    with pytest.raises(KeyError, match="'made_up'.*computed by no part"):
        mismatch.mismatch_metrics(*_ragged())


def test_a_new_card_carries_the_metrics_version_and_an_old_card_still_loads(tmp_path):
    root = tmp_path / "results"
    results.store("demo", {"a": [{"step": 1, schema.KL_K3: 0.1}]}, command="x", wall_seconds=1, root=root)
    assert results.card("demo", root=root)["metrics_version"] == metrics.VERSION
    old = [
        p.parent.name
        for p in results.RESULTS.glob(f"*/{results.CARD}")
        if "metrics_version" not in results.card(p.parent.name)
    ]
    assert old, "every shipped card has a metrics_version: this check needs one stored before the field"
    assert results.load(old[0]) and results.describe(old[0])
