"""The review's axes are computed once per run (`run_review` writes them, hashed, before its notebooks) and every
notebook reads them: the same figures as computing them in the notebook, and a notebook opened alone, on changed
inputs or on a cache that is not the one the manifest hashed computes them itself."""

from __future__ import annotations

import json

import pytest

from k3lib.opening import review
from k3lib.report import review_figures as figures
from k3lib.renewal.drill import not_run
from k3lib.renewal.inputs import FIVE_QUESTIONS
from k3lib.renewal.review import AXES_CACHE, analyse, load_review, read_axes_cache, write_axes_cache

DEMO = "parameters/renewal-demo.yaml"


@pytest.fixture()
def run(tmp_path):
    ctx = review.open_review("load", DEMO, [], str(tmp_path / "r"))
    computed = analyse(load_review(ctx.params))
    return ctx, computed


def reopen(ctx, axis="load", overrides=()):
    """A notebook of the same run, as `run_review` opens it: the run's params.json and run folder."""
    return review.open_review(axis, str(ctx.store.path("params.json")), list(overrides), str(ctx.store.root))


def test_the_notebooks_read_the_axes_the_run_computed_once(run):
    ctx, computed = run
    assert read_axes_cache(ctx.params, ctx.store) is None  # nothing cached yet: a notebook computes
    assert write_axes_cache(ctx.params, ctx.store) == computed
    assert ctx.store.verify() == [] and AXES_CACHE in ctx.store.manifest()["files"]
    nb = reopen(ctx, "production")
    assert read_axes_cache(nb.params, nb.store) == computed  # the resolved params.json hashes the same
    assert nb.axes() == computed
    assert nb._data is None  # read from the cache: the inputs and series were not loaded
    load = reopen(ctx, "load")
    figure = review.axis_figure(load, load.axes()["load"]).to_json()
    assert load._data is None
    assert figure == figures.axis_figure("load", computed["load"], load_review(ctx.params).frame).to_json()


def test_a_changed_input_or_cache_is_not_used(run):
    ctx, computed = run
    write_axes_cache(ctx.params, ctx.store)
    # other parameters: another hash, so the notebook computes from its own
    other = reopen(ctx, overrides=["review.rules.idle_util_max=0.2"])
    assert read_axes_cache(other.params, other.store) is None
    # an input file edited after the cache was written
    incidents = ctx.params.review.inputs.incidents
    with open(incidents, "a", encoding="utf-8") as f:
        f.write("\n")
    assert read_axes_cache(ctx.params, ctx.store) is None
    with open(incidents, encoding="utf-8") as f:
        text = f.read()
    with open(incidents, "w", encoding="utf-8") as f:
        f.write(text[:-1])
    assert read_axes_cache(ctx.params, ctx.store) == computed
    # the cache edited behind the manifest's back
    path = ctx.store.path(AXES_CACHE)
    data = json.loads(path.read_text(encoding="utf-8"))
    data["axes"]["cost"]["tampered"] = True
    path.write_text(json.dumps(data), encoding="utf-8")
    assert read_axes_cache(ctx.params, ctx.store) is None
    nb = reopen(ctx, "cost")
    assert nb.axes() == computed


def test_a_cached_axis_that_does_not_fit_its_model_is_computed_again(run):
    """The axes cache holds each typed axis as its model's JSON; one that no longer fits the model (another kit
    version's cache, its hash in the manifest all the same) is not read half-way: the notebook computes the axes."""
    ctx, computed = run
    write_axes_cache(ctx.params, ctx.store)
    cached = read_axes_cache(ctx.params, ctx.store)
    assert cached is not None and all(cached[a] == computed[a] for a in ("production", "cost", "stability", "operations"))
    data = ctx.store.read_json(AXES_CACHE)
    data["axes"]["operations"]["per_week_h"] = "many"
    ctx.store.write_json(AXES_CACHE, data)  # rewritten through the store: its hash in the manifest
    assert ctx.store.verify() == [] and read_axes_cache(ctx.params, ctx.store) is None
    assert reopen(ctx, "operations").axes() == computed


def test_the_drill_changes_only_the_stability_axis_as_before(run):
    ctx, _ = run
    write_axes_cache(ctx.params, ctx.store)
    drill = {**not_run("test"), "answers": {q: {"question": q, "answer": "no" if i == 0 else "yes", "evidence": "test"}
                                            for i, q in enumerate(FIVE_QUESTIONS)}}
    expected = analyse(load_review(ctx.params), drill)
    nb = reopen(ctx, "stability")
    assert nb.axes(drill) == expected
    assert nb._data is None
    assert expected["stability"] != analyse(load_review(ctx.params))["stability"]  # the drill did change it
