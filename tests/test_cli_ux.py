"""The command line a new user meets: checks before writing, refusals with the fix, one error style,
warnings for empty indexes and missing Punkt, relocatable and byte-identical prepared folders."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from cli_fixtures import run


@pytest.fixture
def no_punkt(monkeypatch, tmp_path):
    """NLTK finds no Punkt tables and the install lacks tcqa-data's own (a broken install)."""
    import nltk

    import tcqa_data.data
    from tcqa_data.decontam.build.preflight import minhash_windows_problem
    from tcqa_data.decontam.minhash import MinHashParams
    from tcqa_data.decontam.minhash import windows as mh_windows

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "no_nltk_data")])
    monkeypatch.setattr(tcqa_data.data, "NLTK_DATA", tmp_path / "no_shipped_nltk_data")
    mh_windows._punkt.cache_clear()
    if minhash_windows_problem(MinHashParams()) is None:
        pytest.skip("MinHash windows need no Punkt with the default parameters")
    yield
    mh_windows._punkt.cache_clear()


# ---- top level --------------------------------------------------------------------------------
def test_version_and_quiet_on_every_command(monkeypatch, capsys):
    import tcqa_data

    code, out, _ = run(["--version"], monkeypatch, capsys)
    assert code == 0 and out.strip() == f"tcqa-data {tcqa_data.__version__}"
    from typer.main import get_command

    from tcqa_data.cli import app

    group = get_command(app)
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):  # `score`: a group of result-only commands, nothing to quieten
            continue
        opts = {o for p in cmd.params for o in getattr(p, "opts", [])}
        assert {"-q", "--quiet"} <= opts, f"`tcqa-data {name}` lacks -q/--quiet"


def test_errors_have_one_style(tmp_path, monkeypatch, capsys):
    code, _, err = run(["index-corpus", tmp_path / "missing.jsonl", "--out", tmp_path / "idx"],
                       monkeypatch, capsys)
    assert code == 2
    assert err.startswith("Error: ") and "missing.jsonl" in err and "no such file" in err
    assert "error:" not in err and "Traceback" not in err
    assert not (tmp_path / "idx").exists()
    # a usage error from the option parser reads the same way
    code, _, err = run(["index-corpus", tmp_path / "c.jsonl"], monkeypatch, capsys)
    assert code == 2 and err.splitlines()[-1] == "Error: Missing option '--out'."


# ---- index-corpus ------------------------------------------------------------------------------
def test_index_without_punkt_writes_nothing_and_keeps_an_existing_index(small, no_punkt, tmp_path,
                                                                        monkeypatch, capsys):
    out = tmp_path / "new" / "idx"
    code, _, err = run(["index-corpus", small["corpus"], "--out", out, "--workers", "1"], monkeypatch, capsys)
    assert code == 2 and err.startswith("Error: ")
    assert "NLTK_DATA" in err and "punkt_tab" in err and "--no-minhash" in err
    assert not (tmp_path / "new").exists()  # not even the folder, so no _work/ either
    # --overwrite of an existing index: the check comes first, so the index survives
    before = sorted(p.relative_to(small["index"]) for p in small["index"].rglob("*"))
    code, _, err = run(["index-corpus", small["corpus"], "--out", small["index"], "--overwrite"],
                       monkeypatch, capsys)
    assert code == 2 and "punkt_tab" in err
    assert sorted(p.relative_to(small["index"]) for p in small["index"].rglob("*")) == before
    # without MinHash no Punkt is needed
    code, _, err = run(["index-corpus", small["corpus"], "--out", out, "--no-minhash", "--workers", "1"],
                       monkeypatch, capsys)
    assert code == 0 and "indexed 21 docs" in err


def test_index_refuses_bad_output_and_mismatched_parameters_before_writing(small, tmp_path, monkeypatch,
                                                                           capsys):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    code, _, err = run(["index-corpus", small["corpus"], "--out", a_file / "idx", "--no-minhash"],
                       monkeypatch, capsys)
    assert code == 2 and "is a file" in err
    mtimes = {p: p.stat().st_mtime_ns for p in small["index"].rglob("*")}
    code, _, err = run(["index-corpus", small["corpus"], "--out", small["index"], "--ngram", "8"],
                       monkeypatch, capsys)
    assert code == 2 and "other parameters" in err and "--overwrite" in err
    assert not (small["index"] / "_work").exists()
    assert {p: p.stat().st_mtime_ns for p in small["index"].rglob("*")} == mtimes


def test_empty_corpus_is_refused_and_a_zero_doc_index_warns(small, tmp_path, monkeypatch, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    code, _, err = run(["index-corpus", empty, "--out", tmp_path / "e", "--no-minhash"], monkeypatch, capsys)
    assert code == 2 and "empty" in err and "empty.jsonl" in err
    assert not (tmp_path / "e").exists()
    blank = tmp_path / "blank.jsonl"  # records, but no text: an index of 0 documents
    blank.write_text('{"text": "   "}\n{"text": ""}\n')
    idx = tmp_path / "zero"
    code, _, err = run(["index-corpus", blank, "--out", idx, "--no-minhash", "-q"], monkeypatch, capsys)
    assert code == 0 and err.startswith("Warning: ") and "0 documents" in err
    prep = tmp_path / "prep"
    code, _, err = run(["decontaminate", idx, "--tasks", "mc_taco", "--out", prep, "-q",
                        "--data-files", f"mc_taco:validation={small['data']}"], monkeypatch, capsys)
    assert code == 0 and err.count("0 documents") == 1
    rep = json.loads((prep / "mc_taco" / "validation" / "report.json").read_text())
    assert any("0 documents" in w for w in rep["warnings"])
    md = (prep / "mc_taco" / "validation" / "report.md").read_text()
    assert md.index("## Warnings") < md.index("## Counts") and "0 documents" in md
    assert "0 documents" in (prep / "mc_taco" / "validation" / "report.html").read_text()


def test_rerun_and_append_of_indexed_inputs_say_nothing_was_added(small, tmp_path, monkeypatch, capsys):
    idx = tmp_path / "idx"
    code, _, err = run(["index-corpus", small["corpus"], "--out", idx, "--no-minhash", "--workers", "1"],
                       monkeypatch, capsys)
    assert code == 0 and err.startswith("indexed 21 docs from 1 input(s)")
    manifest = (idx / "manifest.json").read_bytes()
    for extra in ([], ["--append"]):
        code, _, err = run(["index-corpus", small["corpus"], "--out", idx, "--no-minhash", *extra],
                           monkeypatch, capsys)
        assert code == 0 and err.startswith("nothing added") and "indexed" not in err.split(":")[0]
        assert (idx / "manifest.json").read_bytes() == manifest
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"text": "A new document about lighthouses on rocky northern coasts."}) + "\n")
    code, _, err = run(["index-corpus", more, "--out", idx, "--no-minhash", "--append"], monkeypatch, capsys)
    assert code == 0 and err.startswith("added 1 input(s)") and "22 docs from 2 input(s)" in err


def test_index_info_is_readable_and_quiet_checks(small, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "60")  # a narrow terminal must not cut the input path
    code, out, _ = run(["index-info", small["index"]], monkeypatch, capsys)
    assert code == 0
    assert str(small["corpus"]) in out.replace("\n", "")
    assert "{" not in out  # MinHash parameters and counts as rows, not raw JSON
    assert re.search(r"minhash\s.*\b128 permutations", out) and "threshold 0.5" in out
    code, out, err = run(["index-info", small["index"], "-q"], monkeypatch, capsys)
    assert (code, out, err) == (0, "", "")
    code, out, err = run(["index-info", tmp_path, "-q"], monkeypatch, capsys)
    assert code == 2 and out == "" and err.startswith("Error: ")


# ---- decontaminate ---------------------------------------------------------------------------
def test_data_files_need_task_and_split(small, tmp_path, monkeypatch, capsys):
    from tcqa_data.errors import ConfigError
    from tcqa_data.prep.task_jobs import parse_data_files

    for bad in (f"mc_taco={small['data']}", "mc_taco:=x.tsv", "mc_taco:test=", str(small["data"])):
        with pytest.raises(ConfigError, match="expected TASK:SPLIT=PATH"):
            parse_data_files([bad], ["mc_taco"])
    assert parse_data_files(["mc_taco:test=x.tsv"], ["mc_taco"]) == {"mc_taco": {"test": "x.tsv"}}
    out = tmp_path / "prep"
    code, _, err = run(["decontaminate", small["index"], "--tasks", "mc_taco", "--out", out,
                        "--data-files", f"mc_taco={small['data']}"], monkeypatch, capsys)
    assert code == 2 and err.startswith("Error: ") and "mc_taco:test=" in err
    assert not out.exists()


def test_decontaminate_without_punkt(small, no_punkt, tmp_path, monkeypatch, capsys):
    files = ["--data-files", f"mc_taco:validation={small['data']}"]
    refused = tmp_path / "refused"
    code, _, err = run(["decontaminate", small["index"], "--tasks", "mc_taco", "--out", refused,
                        "--rule", "any-ngram|minhash>=0.8", *files], monkeypatch, capsys)
    assert code == 2 and "minhash>=0.8" in err and "punkt_tab" in err
    assert not refused.exists()
    out = tmp_path / "prep"
    code, stdout, err = run(["decontaminate", small["index"], "--tasks", "mc_taco", "--out", out, *files],
                            monkeypatch, capsys)
    assert code == 0 and err.count("Warning: MinHash evidence") == 1 and "punkt_tab" in err
    assert re.search(r"mc_taco/validation: [1-9]\d*/\d+ groups dirty", stdout)  # n-grams still work
    cont = pq.read_table(out / "mc_taco" / "validation" / "contamination.parquet")
    assert cont.column("minhash_sim").null_count == cont.num_rows
    rep = json.loads((out / "mc_taco" / "validation" / "report.json").read_text())
    assert rep["method"]["minhash_evidence"].startswith("off") and rep["warnings"]
    manifest = json.loads((out / "prep_manifest.json").read_text())
    assert manifest["minhash_available"] is True and manifest["warnings"] == rep["warnings"]


def test_minhash_sim_is_null_without_a_candidate(small, tmp_path):
    from tcqa_data.prep.pipeline import decontaminate

    out = tmp_path / "prep"
    decontaminate(small["index"], "mc_taco", out, data_files={"mc_taco": {"validation": small["data"]}},
                  quiet=True)
    cont = pq.read_table(out / "mc_taco" / "validation" / "contamination.parquet").to_pandas()
    sims = cont["minhash_sim"]
    assert sims.isna().any() and sims.notna().any()  # the quoted sentences have a candidate, most do not
    assert (sims.dropna() >= 0).all() and (sims.dropna() <= 1).all()
    assert (sims.dropna() >= 0.99).any()  # a quoted sentence meets its own window


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_prepared_folders_are_relocatable_and_byte_identical(small, tmp_path):
    """Two runs into different folders (different depths) give the same bytes in every file, and no
    file holds an absolute path of the output, the index or the data."""
    from tcqa_data.prep.pipeline import decontaminate

    files = {"mc_taco": {"validation": small["data"]}}
    a = tmp_path / "a"
    b = tmp_path / "deeper" / "folder" / "b"
    decontaminate(small["index"], "mc_taco", a, data_files=files, quiet=True)
    decontaminate(small["index"], "mc_taco", b, data_files=files, quiet=True)
    snap = _snapshot(a)
    assert any(k.endswith("report.html") for k in snap) and any(k.endswith(".yaml") for k in snap)
    assert _snapshot(b) == snap
    absolute = [str(tmp_path), str(small["root"]), str(small["root"].resolve())]
    for p in a.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            for path in absolute:
                assert path.encode() not in data, f"{p.relative_to(a)} holds the absolute path {path}"


def test_report_markdown_and_html_carry_the_same_content(small, tmp_path):
    """report.html is report.md plus plots: same headings, same table cells, same evidence."""
    import html as html_mod

    from markdown_it import MarkdownIt

    from tcqa_data.prep.pipeline import decontaminate

    out = tmp_path / "prep"
    decontaminate(small["index"], "mc_taco", out, data_files={"mc_taco": {"validation": small["data"]}},
                  quiet=True)
    d = out / "mc_taco" / "validation"
    md_html = MarkdownIt("commonmark").enable("table").render((d / "report.md").read_text())
    page = (d / "report.html").read_text()

    def texts(tag: str, doc: str) -> list[str]:
        return [html_mod.unescape(re.sub(r"<[^>]+>", "", m)).strip()
                for m in re.findall(rf"<{tag}[^>]*>(.*?)</{tag}>", doc, flags=re.S)]

    for tag in ("h1", "h2", "td", "th", "li", "blockquote"):
        assert texts(tag, md_html) == texts(tag, page), tag
    assert "Where matches come from" in texts("h2", page)
    assert any("dirty only through the group policy" in t for t in texts("td", page))
    assert page.count("data:image/png;base64,") == 3 and "<mark>" in page
