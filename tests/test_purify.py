"""``tcqa-data purify``: the corpus minus its contamination, checked against lm-eval's Janitor.

Real data: the stream tests' corpus (a wiki slice with MC-TACO and based-squad text injected,
some re-wrapped into 8-word lines) and benchmark slices.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_stream import bench, injected_corpus  # noqa: F401 - fixtures

from tcqa_data.errors import ConfigError
from tcqa_data.prep.pipeline import decontaminate
from tcqa_data.prep.purify import purify

TASKS = ["mc_taco", "squad_completion"]


@pytest.fixture(scope="module")
def corpus(wiki_sample, bench, tmp_path_factory) -> tuple[Path, dict]:  # noqa: F811
    return injected_corpus(wiki_sample, bench, tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def excised(corpus, bench, tmp_path_factory) -> tuple[Path, dict]:  # noqa: F811
    """``--no-janitor-exact``: windows across all-punctuation words and short items whole."""
    out = tmp_path_factory.mktemp("purified") / "out"
    report = purify([str(corpus[0])], TASKS, out, data_files=bench, mode="excise", janitor_exact=False,
                    quiet=True)
    return out, report


@pytest.fixture(scope="module")
def excised_exact(corpus, bench, tmp_path_factory) -> tuple[Path, dict]:  # noqa: F811
    """The default: Janitor.clean_python's pieces."""
    out = tmp_path_factory.mktemp("purified_exact") / "out"
    report = purify([str(corpus[0])], TASKS, out, data_files=bench, mode="excise", quiet=True)
    return out, report


def _janitor(bench: dict) -> object:  # noqa: F811
    """lm-eval's Janitor with every benchmark doc's decontamination query registered."""
    from lm_eval.decontamination.janitor import Janitor

    from tcqa_data.prep.benchmarks import load_split
    from tcqa_data.prep.taskspec import TaskSpec

    jan = Janitor()  # 13-grams, window 200, minimum slice 200, too dirty after 10 matches
    for task, files in bench.items():
        spec = TaskSpec.resolve(task)
        for split, path in files.items():
            for d in load_split(spec, split, path).docs():
                jan.register_contaminant_python(spec.decontamination_query(d))
    return jan


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_excise_equals_janitor_clean_python_doc_by_doc(corpus, bench, excised_exact):  # noqa: F811
    out, report = excised_exact
    jan = _janitor(bench)
    source = corpus[0].read_text(encoding="utf-8").splitlines(keepends=True)
    written = (out / corpus[0].name).read_text(encoding="utf-8").splitlines(keepends=True)
    log = {r["row"]: r for r in pq.read_table(out / "removal_log.parquet").to_pylist()}
    pos = 0
    cut = 0
    for line, raw in enumerate(source, 1):
        record = json.loads(raw)
        expected = jan.clean_python(record["text"])
        entry = log.get(line)
        if entry is None or entry["action"] == "kept":
            # untouched, byte for byte; Janitor finds no match in it either (it drops every doc
            # under 200 chars: the quirk purify does not copy)
            assert written[pos] == raw
            assert expected == ([record["text"]] if len(record["text"]) >= 200 else [])
            pos += 1
            continue
        pieces = [json.loads(x) for x in written[pos:pos + entry["pieces"]]]
        pos += entry["pieces"]
        assert [p["text"] for p in pieces] == expected, line
        assert all(p["purify_piece"] == k and p["title"] == record["title"] for k, p in enumerate(pieces))
        removed = sum(b - a for a, b in entry["removed_spans"])
        assert removed == len(record["text"]) - sum(len(p) for p in expected)
        cut += 1
    assert pos == len(written)
    assert cut == report["totals"]["cut"] + report["totals"]["dropped"] >= 15
    # every injected item's host doc, re-wrapped ones included, was cut or dropped
    assert report["totals"]["contaminated_docs"] >= sum(len(v) for v in corpus[1].values())
    assert all(report["tasks"][t]["contaminated_docs"] for t in TASKS)
    assert (out / "purify_report.md").read_text().startswith("# Purified corpus")


def test_the_most_copies_table_is_shown_only_where_a_doc_has_more_than_one(excised_exact):
    from tcqa_data.prep.purify import _markdown

    _, report = excised_exact
    title = "Benchmark docs with the most corpus copies"
    top = report["top_benchmark_docs"]
    assert top
    ones = {**report, "top_benchmark_docs": [{**d, "corpus_docs": 1} for d in top]}
    assert title not in _markdown(ones)  # a column of 1s ranks nothing
    copied = {**report, "top_benchmark_docs": [{**top[0], "corpus_docs": 3}, *ones["top_benchmark_docs"][1:]]}
    page = _markdown(copied)
    assert title in page and f"| {top[0]['doc_id']} | 3 |" in page


def test_no_janitor_exact_also_cuts_across_punctuation_words(corpus, bench, excised, excised_exact):  # noqa: F811
    """MC-TACO writes " , " between words: Janitor never matches a window across it (a doc it keeps
    whole); --no-janitor-exact cuts there too, and equals Janitor on docs where no match crosses one."""
    jan = _janitor(bench)
    exact = {r["row"]: r for r in pq.read_table(excised_exact[0] / "removal_log.parquet").to_pylist()}
    default = {r["row"]: r for r in pq.read_table(excised[0] / "removal_log.parquet").to_pylist()}
    # --no-janitor-exact also matches the injected short item (12 words) whole; Janitor registers
    # 13-grams only
    lines = corpus[0].read_text(encoding="utf-8").splitlines()
    item = corpus[1]["mc_taco_short"][0]
    short_row = next(i for i, x in enumerate(lines, 1) if item in json.loads(x)["text"])
    assert set(default) - set(exact) == {short_row} and default[short_row]["action"] in ("cut", "dropped")
    default.pop(short_row)
    assert [r["action"] for r in exact.values()].count("kept") >= 1
    assert "kept" not in [r["action"] for r in default.values()]
    texts = {i: json.loads(line)["text"] for i, line in enumerate(corpus[0].read_text().splitlines(), 1)}
    same = [row for row in default if exact[row]["removed_spans"] == default[row]["removed_spans"]]
    assert len(same) >= len(default) // 2
    for row in same:
        pieces = jan.clean_python(texts[row])
        removed = sum(b - a for a, b in default[row]["removed_spans"])
        assert sum(len(p) for p in pieces) == len(texts[row]) - removed


@pytest.mark.parametrize("mode", ["excise", "drop"])
def test_the_purified_corpus_flags_nothing(corpus, bench, excised, tmp_path, mode):  # noqa: F811
    from tcqa_data.decontam.build import build_index

    out = excised[0]
    if mode == "drop":
        out = tmp_path / "dropped"
        report = purify([str(corpus[0])], TASKS, out, data_files=bench, mode="drop", quiet=True)
        assert report["totals"]["dropped"] == report["totals"]["contaminated_docs"] > 0
        assert len(_records(out / corpus[0].name)) == len(_records(corpus[0])) - report["totals"]["dropped"]
    index = tmp_path / "index"
    build_index([str(out / corpus[0].name)], index, ngram_sizes=(13,), minhash=False, text_store="none",
                quiet=True, workers=1)
    summary = decontaminate(index, TASKS, tmp_path / "prep", data_files=bench, quiet=True)
    # stream mode also matches the short items (8-12 words) whole: those were removed too
    streamed = decontaminate(None, TASKS, tmp_path / "prep_stream", data_files=bench, quiet=True,
                             corpus=[str(out / corpus[0].name)])
    for s in (summary, streamed):
        for per in s["tasks"].values():
            for counts in per.values():
                assert counts["dirty_docs"] == 0
    before = decontaminate(None, ["mc_taco"], tmp_path / "before", data_files={"mc_taco": bench["mc_taco"]},
                           quiet=True, corpus=[str(corpus[0])])
    short = pq.read_table(tmp_path / "before" / "mc_taco" / "test" / "contamination.parquet").to_pandas()
    short = short[short["query"] == corpus[1]["mc_taco_short"][0]]
    assert before["tasks"]["mc_taco"]["test"]["dirty_docs"] > 0 and short["doc_dirty"].all()
    log = pq.read_table(out / "removal_log.parquet").to_pandas()
    row = int(short["matched_doc_refs"].iloc[0][0].rsplit(":", 1)[1])
    assert set(log[log["row"] == row]["matched_doc_ids"].iloc[0]) == set(short["doc_id"])


def test_formats_are_kept_and_output_is_deterministic(corpus, bench, excised_exact, tmp_path):  # noqa: F811
    src = tmp_path / "src"
    src.mkdir()
    rows = _records(corpus[0])
    with gzip.open(src / "a.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    pq.write_table(pa.Table.from_pylist(rows), src / "b.parquet")
    outs = []
    for k in range(2):
        out = tmp_path / f"out{k}"
        purify([str(src)], TASKS, out, data_files=bench, quiet=True)
        outs.append(out)
    names = sorted(p.name for p in outs[0].iterdir())
    assert names == [".tcqa-output.json", "a.jsonl.gz", "b.parquet", "purify_report.json", "purify_report.md",
                     "removal_log.parquet"]  # the first: the owner marker (outputs.OWNER_MARKER)
    for name in names:
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    want = [r["text"] for r in _records(excised_exact[0] / corpus[0].name)]
    with gzip.open(outs[0] / "a.jsonl.gz", "rt", encoding="utf-8") as fh:
        assert [json.loads(x)["text"] for x in fh] == want
    table = pq.read_table(outs[0] / "b.parquet")
    assert table.column("text").to_pylist() == want
    assert set(table.column_names) >= {"title", "text", "purify_doc_ref", "purify_piece"}


def test_an_output_that_is_holds_or_is_inside_an_input_is_refused(corpus, bench, tmp_path):  # noqa: F811
    src = tmp_path / "corpus"
    src.mkdir()
    shutil.copy(corpus[0], src / "c.jsonl")
    for out in (src, src / "clean", tmp_path):
        with pytest.raises(ConfigError, match="is, holds or lies inside the input"):
            purify([str(src)], TASKS, out, data_files=bench, quiet=True)
    assert sorted(p.name for p in src.iterdir()) == ["c.jsonl"]
    with pytest.raises(ConfigError, match="--mode"):
        purify([str(src)], TASKS, tmp_path / "o", data_files=bench, mode="cut", quiet=True)
    assert not (tmp_path / "o").exists()


def test_word_bounds_are_janitors_words(corpus):
    """Janitor splits with re.finditer(r"\\S+"): the vectorized bounds give the same words."""
    import re

    from tcqa_data.decontam.stream.excise import _word_bounds

    texts = [json.loads(x)["text"] for x in corpus[0].read_text(encoding="utf-8").splitlines()[:50]]
    for text in texts + ["", "  ", "a\u3000b\x1cc\u2028d\xa0e ", "lover , Tom Ransome , now"]:
        starts, ends = _word_bounds(text)
        words = [m.span() for m in re.finditer(r"\S+", text)]
        assert list(zip(starts.tolist(), ends.tolist(), strict=True)) == words


def test_word_spans_map_to_their_words_and_are_cut_with_janitors_margin_and_pieces(corpus):
    """A semantic best window (a word span) is cut as ``cut_spans`` says: its chars widened by the
    margin, overlapping cuts merged, fragments of at most ``minimum_slice`` chars not kept, Janitor's
    own pieces untouched, too many cuts in all drop the doc."""
    from tcqa_data.decontam.core.normalize import normalize, tokenize
    from tcqa_data.decontam.stream.excise import cut_spans
    from tcqa_data.decontam.stream.purify import _char_spans

    texts = [json.loads(x)["text"] for x in corpus[0].read_text(encoding="utf-8").splitlines()[:20]]
    for text in texts + ["lover , Tom Ransome , now (c) -- 1.5x"]:
        words = tokenize(text)
        spans = [(a, min(a + 7, len(words))) for a in range(0, len(words), 97)]
        for (a, b), (c, d) in zip(spans, _char_spans(text, spans, "janitor"), strict=True):
            assert normalize(text[c:d]).split() == words[a:b]
    # margin 200, minimum slice 200, cutoff 10 (Janitor's defaults)
    assert cut_spans(2000, [(0, 2000)], [(650, 700), (500, 600)], 0) == ([(0, 300), (900, 2000)], 1)
    assert cut_spans(2000, [(0, 2000)], [(300, 400)], 0) == ([(600, 2000)], 1)  # (0, 100) too short
    assert cut_spans(2000, [(0, 500), (1000, 2000)], [(1500, 1550)], 3) == \
        ([(0, 500), (1000, 1300), (1750, 2000)], 1)
    assert cut_spans(2000, [(0, 500), (1000, 2000)], [(1500, 1550)], 10) == ([], 1)  # 11 cuts > 10


def test_kill9_leaves_no_output_and_a_rerun_gives_the_same_bytes(corpus, bench, tmp_path):  # noqa: F811
    """Killed while it writes (its staging folder exists): no output folder; a rerun writes the bytes
    of an uninterrupted run."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tcqa_data.outputs import STAGING_PREFIX

    big = tmp_path / "big" / "corpus.jsonl"  # 20 copies: writing takes long enough to be caught
    big.parent.mkdir()
    big.write_bytes(corpus[0].read_bytes() * 20)

    def command(out: Path) -> list[str]:
        cmd = [sys.executable, "-m", "tcqa_data", "purify", str(big), "--tasks", ",".join(TASKS),
               "--out", str(out), "-q"]
        return cmd + [f"--data-files={t}:{s}={p}" for t, files in bench.items() for s, p in files.items()]

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    subprocess.run(command(tmp_path / "ref"), env=env, check=True)
    out = tmp_path / "out"
    proc = subprocess.Popen(command(out), env=env)
    while proc.poll() is None and not any(p.name.startswith(STAGING_PREFIX) for p in tmp_path.iterdir()):
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert not out.exists()
    subprocess.run(command(out), env=env, check=True)
    names = sorted(p.name for p in (tmp_path / "ref").iterdir())
    assert names == sorted(p.name for p in out.iterdir())
    for name in names:
        assert (out / name).read_bytes() == (tmp_path / "ref" / name).read_bytes(), name


def test_cli_stream_decontaminate_and_purify(corpus, bench, tmp_path, monkeypatch, capsys):  # noqa: F811
    from test_cli_ux import run

    files = [f"--data-files={t}:{s}={p}" for t, fs in bench.items() for s, p in fs.items()]
    args = ["decontaminate", "--corpus", corpus[0], "--tasks", ",".join(TASKS), *files,
            "--out", tmp_path / "prep", "--workers", "2", "--short-min-words", "0"]
    code, out, err = run(args, monkeypatch, capsys)
    assert code == 0 and "mc_taco/test:" in out and not err
    manifest = json.loads((tmp_path / "prep" / "prep_manifest.json").read_text())
    assert manifest["index"]["mode"] == "stream" and manifest["index"]["inputs"][0]["path"] == corpus[0].name
    code, out, err = run(["purify", corpus[0], "--tasks", ",".join(TASKS), *files, "--mode", "drop",
                          "--out", tmp_path / "clean"], monkeypatch, capsys)
    assert code == 0 and "dropped" in out and (tmp_path / "clean" / corpus[0].name).is_file()
    code, out, err = run(["purify", corpus[0], "--tasks", ",".join(TASKS), *files, "--out", corpus[0].parent],
                         monkeypatch, capsys)
    assert code == 2 and err.startswith("Error: --out") and len(err.strip().splitlines()) == 1


def _registered(tasks_files: dict) -> object:
    """lm-eval's Janitor with every doc's decontamination query of these task files registered."""
    from lm_eval.decontamination.janitor import Janitor

    from tcqa_data.prep.benchmarks import load_split
    from tcqa_data.prep.taskspec import TaskSpec

    jan = Janitor()
    for task, files in tasks_files.items():
        spec = TaskSpec.resolve(task)
        for split, path in files.items():
            for d in load_split(spec, split, path).docs():
                jan.register_contaminant_python(spec.decontamination_query(d))
    return jan


def _pieces_by_row(out: Path, name: str, source: Path) -> dict[int, list[str]]:
    """Each contaminated source row's written pieces (``removal_log.parquet`` in row order)."""
    written = (out / name).read_text(encoding="utf-8").splitlines()
    log = {r["row"]: r for r in pq.read_table(out / "removal_log.parquet").to_pylist()}
    got, pos = {}, 0
    for line in range(1, len(source.read_text(encoding="utf-8").splitlines()) + 1):
        entry = log.get(line)
        if entry is None or entry["action"] == "kept":
            pos += 1
            continue
        got[line] = [json.loads(x)["text"] for x in written[pos:pos + entry["pieces"]]]
        pos += entry["pieces"]
    assert pos == len(written)
    return got


def test_the_10_character_cut_a_window_across_an_emptied_word(wiki_sample, squad_validation, tmp_path):
    """Issue 40's probe: `purify --mode excise` cut 10 chars more than Janitor.clean_python from the
    second piece of a Wikipedia article. The mechanism: the copy of a benchmark text ends
    "... word () word." (WikiExtractor leaves "()" where a template was); "()" normalizes to
    nothing, so Janitor never matches a window holding it, while windows of words that keep
    characters (as the index sees them) matched one window further. The default now cuts
    Janitor's pieces; --no-janitor-exact keeps the longer cut."""
    from tcqa_data.prep.taskspec import TaskSpec

    with open(squad_validation, encoding="utf-8") as fh:
        rows = [json.loads(next(fh)) for _ in range(20)]
    bench_file = tmp_path / "squad.jsonl"
    bench_file.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    words = TaskSpec.resolve("squad_completion").decontamination_query(rows[0]).split()
    with open(wiki_sample, encoding="utf-8") as fh:
        article = json.loads(next(fh))["text"]
    text = f"{article[:1500]} {' '.join(words[:14])} () {words[14]}. {article[1500:3000]}"
    src = tmp_path / "in" / "c.jsonl"
    src.parent.mkdir()
    src.write_text(json.dumps({"id": "life", "text": text}) + "\n", encoding="utf-8")
    files = {"squad_completion": {"validation": str(bench_file)}}
    expected = _registered(files).clean_python(text)
    assert len(expected) == 2
    for exact in (True, False):
        out = tmp_path / f"out{exact}"
        purify([str(src)], ["squad_completion"], out, data_files=files, janitor_exact=exact, quiet=True)
        got = _pieces_by_row(out, "c.jsonl", src)[1]
        if exact:
            assert got == expected
        else:  # one more window: " () word" more cut from the second piece
            assert got[0] == expected[0] and expected[1].endswith(got[1])
            assert len(expected[1]) - len(got[1]) == len(f" () {words[14]}.")


@pytest.mark.slow
def test_excise_equals_janitor_on_every_contaminated_article_of_the_wiki_sample(wiki_sample, mc_taco_test,
                                                                                  squad_validation, tmp_path):
    """The whole 20 MB sample, MC-TACO test and based-squad validation registered: every article
    purify cuts or drops has Janitor.clean_python's pieces, exactly."""
    files = {"mc_taco": {"test": str(mc_taco_test)},
             "squad_completion": {"validation": str(squad_validation)}}
    out = tmp_path / "out"
    report = purify([str(wiki_sample)], list(files), out, data_files=files, quiet=True)
    got = _pieces_by_row(out, wiki_sample.name, wiki_sample)
    assert len(got) == report["totals"]["cut"] + report["totals"]["dropped"] >= 20
    jan = _registered(files)
    with open(wiki_sample, encoding="utf-8") as fh:
        for line, raw in enumerate(fh, 1):
            if line in got:
                assert got[line] == jan.clean_python(json.loads(raw)["text"]), line
