"""CLI commands of this stage (registered on the shared Typer app): index-corpus, index-info."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from tcqa_data.cli import CorpusPreset, Engine, Normalization, OnError, app, choices, value_of, warning
from tcqa_data.cli.help_format import PanelCommand
from tcqa_data.decontam.readers.presets import text_field_for
from tcqa_data.errors import ConfigError


def _parse_ngrams(value: str) -> list[int]:
    try:
        ns = [int(x) for x in value.replace(" ", "").split(",") if x]
    except ValueError as e:
        raise ConfigError(f"--ngram takes sizes like 13 or 8,13, not {value!r}") from e
    if not ns or min(ns) < 1:
        raise ConfigError(f"--ngram takes positive sizes like 13 or 8,13, not {value!r}")
    return ns


TextStore = choices("TextStore", "auto", "copy", "none")  # index-corpus --text-store

@app.command("index-corpus", cls=PanelCommand)
def index_corpus(
    corpus: list[str] = typer.Argument(None, help="Corpus files, globs or folders (.jsonl[.gz|.zst], "
                                                  ".parquet, .txt)."),
    # a str, not a Path: Path("s3://b/x") would read as the local folder "s3:/b/x", and the refusal
    # of object storage (engines.local_output_dir) would never see the URL
    out: str = typer.Option(..., "--out", help="Index folder to create (or extend with --append)."),
    demo: bool = typer.Option(False, "--demo",
                              help="Also index the demo corpus shipped with tcqa-data (162 English "
                                   "Wikipedia articles, 2.7 MB: tcqa_data/data/demo/README.md)."),
    ngram: str = typer.Option("13", "--ngram", rich_help_panel="Index",
                              help="N-gram size(s), e.g. 13 or 8,13."),
    normalization: Normalization = typer.Option("janitor", "--normalization", rich_help_panel="Index",
                                                help="janitor (exactly lm-eval's Janitor) or unicode."),
    text_field: Optional[str] = typer.Option(  # noqa: UP045
        None, "--text-field", rich_help_panel="Corpus layout",
        help="Field holding the document text (default: text); a.b: nested."),
    preset: Optional[CorpusPreset] = typer.Option(  # noqa: UP045
        None, "--preset", rich_help_panel="Corpus layout",
        help="A corpus layout's text field: dolma, fineweb, dclm, redpajama-v2."),
    id_field: str = typer.Option(None, "--id-field", rich_help_panel="Corpus layout",
                                 help="Field used as doc ref (default: file:line)."),
    hf_dataset: str = typer.Option(None, "--hf-dataset", rich_help_panel="Corpus layout",
                                   help="Stream a Hugging Face dataset instead."),
    hf_config: str = typer.Option(None, "--hf-config", rich_help_panel="Corpus layout",
                                  help="Its config name."),
    hf_split: str = typer.Option("train", "--hf-split", rich_help_panel="Corpus layout", help="Its split."),
    workers: int = typer.Option(None, "--workers", rich_help_panel="Parallelism and reruns", min=1,
                                help="Local worker processes (default: all cores)."),
    append: bool = typer.Option(False, "--append", rich_help_panel="Parallelism and reruns",
                                help="Add new inputs to an existing index."),
    overwrite: bool = typer.Option(False, "--overwrite", rich_help_panel="Parallelism and reruns",
                                   help="Replace an existing index."),
    on_error: OnError = typer.Option("raise", "--on-error", rich_help_panel="Corpus layout",
                                     help="raise: stop at a bad record; skip: count it."),
    no_minhash: bool = typer.Option(False, "--no-minhash", rich_help_panel="Index",
                                    help="Build only the n-gram index."),
    num_perm: int = typer.Option(128, "--num-perm", rich_help_panel="Index",
                                 min=1, help="MinHash permutations."),
    provenance: int = typer.Option(2, "--provenance", rich_help_panel="Index", min=1,
                                   help="Doc ordinals kept per n-gram (index size)."),
    num_buckets: int = typer.Option(64, "--num-buckets", rich_help_panel="Index", min=1,
                                    help="Hash buckets of the n-gram index, a power of two (reduce "
                                         "tasks; more buckets: smaller merges, for large corpora)."),
    ngram_dir_bits: int = typer.Option(None, "--ngram-dir-bits", rich_help_panel="Index",
                                       help="Directory bits of the compact n-gram layout (default: chosen "
                                            "from the corpus at the first build; --append keeps the "
                                            "index's; give an appended index's value to rebuild it "
                                            "byte for byte)."),
    text_store: TextStore = typer.Option("auto", "--text-store", rich_help_panel="Index",
                                         help="Corpus text for alignment (aligned>= rule terms): auto (doc "
                                        "locations for .jsonl/.parquet/.txt, a zstd copy for compressed "
                                        "inputs and HF streams), copy (always a copy) or none."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar and no summary line."),
    engine: Engine = typer.Option("local", "--engine", rich_help_panel="Parallelism and reruns",
                                  help="local: worker processes on this machine; ray: Ray tasks "
                                    "(pip install 'tcqa-data[ray]'; see docs/CLUSTER.md)."),
    ray_address: str = typer.Option(None, "--ray-address", rich_help_panel="Parallelism and reruns",
                                    help="With --engine ray: auto, HOST:PORT or ray://HOST:PORT of a "
                                         "running cluster (default: start a local Ray instance "
                                         "with --workers CPUs)."),
) -> None:
    """Index a training corpus: n-gram hashes (exact matches) and MinHash windows (near-duplicates)."""
    from tcqa_data.decontam.build import build_index
    from tcqa_data.decontam.index_files import MANIFEST, read_manifest
    from tcqa_data.engines import local_output_dir
    from tcqa_data.errors import TcqaError

    out_dir = local_output_dir(out)  # object-storage URIs are refused with the reason
    before = None
    if (out_dir / MANIFEST).is_file() and not overwrite:
        try:
            before = read_manifest(out_dir)
        except TcqaError:
            pass  # build_index says what is wrong with it
    inputs = list(corpus or [])
    if not inputs and not demo and not hf_dataset:
        raise ConfigError("no corpus to index: name files, globs or folders, --hf-dataset NAME, or --demo "
                          "(the demo corpus shipped with tcqa-data)")
    if demo:
        from tcqa_data.data import demo_corpus_path

        inputs.append(demo_corpus_path())
    manifest = build_index(
        inputs, out_dir, ngram_sizes=_parse_ngrams(ngram), normalization=value_of(normalization),
        text_field=text_field_for(value_of(preset), text_field),
        id_field=id_field, workers=workers, append=append,
        overwrite=overwrite,
        on_error=value_of(on_error), minhash=not no_minhash, num_perm=num_perm, quiet=quiet,
        hf_dataset=hf_dataset, hf_config=hf_config, hf_split=hf_split, provenance=provenance,
        engine=value_of(engine), ray_address=ray_address, text_store=value_of(text_store),
        num_buckets=num_buckets,
        ngram_dir_bits=ngram_dir_bits,
    )
    c = manifest["counts"]
    if manifest != before:
        for s in manifest.get("skipped_inputs", []):
            if s["reason"].startswith(("no reader takes", "same content as")):
                warning(f"{s['path']} was not indexed: {s['reason']}")
    if c["docs"] == 0:
        warning(f"the index {out} holds 0 documents (every record was empty or skipped): decontaminating "
                "against it would report every benchmark doc clean")
    if quiet:
        return
    if manifest == before:
        typer.echo(f"nothing added: every input is already in the index {out} ({c['docs']:,} docs from "
                   f"{c['inputs']} input(s)); pass --overwrite to rebuild it", err=True)
        return
    grams = ", ".join(f"{n}-grams {v['unique']:,}" for n, v in c["ngrams"].items())
    skipped = manifest.get("skipped", {}).get("counts", {})
    added = manifest.get("build", {}).get("appended_inputs") if before is not None else None
    if added:
        msg = (f"added {len(added)} input(s) to {out}; it now holds {c['docs']:,} docs from {c['inputs']} "
               f"input(s): {grams}")
    else:
        msg = f"indexed {c['docs']:,} docs from {c['inputs']} input(s) into {out}: {grams}"
    if skipped:
        msg += "; skipped " + ", ".join(f"{k} {v:,}" for k, v in sorted(skipped.items()))
    unread = [s["path"] for s in manifest.get("skipped_inputs", [])
              if s["reason"].startswith("no reader takes")]
    if unread:
        msg += f"; not indexed ({len(unread)} file(s) no reader takes): " + ", ".join(unread)
    typer.echo(msg, err=True)


@app.command("index-info", cls=PanelCommand)
def index_info(
    index_dir: Path = typer.Argument(..., help="An index folder built by index-corpus."),
    as_json: bool = typer.Option(False, "--json", help="Print the raw manifest JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q",
                               help="Print nothing; the exit status says whether INDEX_DIR is a "
                                    "complete index."),
    verify: bool = typer.Option(False, "--verify",
                                help="Check every file's checksum (reads the whole index); without it "
                                     "only the files' presence and sizes are checked."),
) -> None:
    """Describe an index: parameters, inputs, counts, skipped records."""
    from tcqa_data.decontam.index_files import reading

    with reading(index_dir):  # a file damaged with its size kept: one line, found by a full check
        _show_index(index_dir, as_json=as_json, quiet=quiet, verify=verify)


def _show_index(index_dir: Path, *, as_json: bool, quiet: bool, verify: bool) -> None:
    from tcqa_data.decontam.build import index_info as load
    from tcqa_data.decontam.index_files import SEAL_KEY

    m = load(index_dir, verify=verify)
    if verify and not quiet:
        typer.echo(f"verified: every file of {index_dir} matches its size and checksum"
                   if SEAL_KEY in m else f"{index_dir} records no checksums (written by an older "
                   "tcqa-data): nothing to verify; rebuild it to add them", err=True)
    if quiet:
        return
    if as_json:
        typer.echo(json.dumps(m, indent=2, sort_keys=True))
        return
    from rich.console import Console
    from rich.table import Table

    con = Console()
    c = m["counts"]
    head = Table(title=f"index {index_dir}", show_header=False)
    head.add_column(no_wrap=True)
    head.add_column(overflow="fold")  # long values (skipped input paths) wrap, never cut with "..."
    head.add_row("format version", str(m["format_version"]))
    head.add_row("normalization", m["normalization"])
    head.add_row("n-gram sizes", ", ".join(map(str, m["ngram_sizes"])))
    head.add_row("hash", f"{m['hash']['name']} seed {m['hash']['seed']}")
    head.add_row("buckets / provenance", f"{m['num_buckets']} / first {m['provenance_docs']} docs")
    head.add_row("fields", f"text {m['text_field']!r}, id {m['id_field']!r}")
    mh = m["minhash"]
    if mh:
        lsh = f"LSH {mh.get('bands')} bands x {mh.get('rows')} rows (threshold {mh.get('threshold')})"
        head.add_row("minhash", f"{mh.get('num_perm')} permutations, seed {mh.get('seed')}, {lsh}")
        head.add_row("minhash windows", f"{mh.get('window_min_words')}..{mh.get('window_max_words')} words, "
                                        f"shingles of {mh.get('shingle_words')} words")
        shown = {"num_perm", "seed", "bands", "rows", "threshold", "window_min_words", "window_max_words",
                 "shingle_words"}
        for key, value in sorted(mh.items()):
            if key not in shown:  # whatever else the MinHash section records, one row each
                head.add_row(f"minhash {key.replace('_', ' ')}", str(value))
    else:
        head.add_row("minhash", "off")
    head.add_row("docs", f"{c['docs']:,} ({c['input_bytes']:,} input bytes)")
    st = m.get("ngram_storage")
    if st:  # format 2: what the n-gram files keep of each n-gram (decontam/ngrams/index.py)
        head.add_row("n-gram storage", (
            f"format {st['format']}: {st['key_bits']}-bit keys of the 64-bit hashes ({st['dir_bits']} "
            f"directory bits + {st['suffix_bits']}-bit stored suffixes), {st['df_bits']}-bit df with "
            f"overflow table, {st['provenance']}"))
    for n, v in c["ngrams"].items():
        head.add_row(f"{n}-grams", f"{v['unique']:,} unique of {v['total']:,}")
        if "false_positive_rate" in v:
            # an n-gram not in the corpus is found when a stored key of its directory cell equals its own
            head.add_row(f"{n}-gram false-positive rate", (
                f"{v['false_positive_rate']:.1e} per query n-gram (fullest directory cell: "
                f"{v['max_cell_keys']:,} keys, {v['max_cell_false_positive_rate']:.1e})"))
        else:  # format 1: full 64-bit hashes, a chance collision with probability unique / 2**64
            head.add_row(f"{n}-gram false-positive rate", f"{v['unique'] / 2.0**64:.1e} per query n-gram")
    if c.get("minhash"):
        head.add_row("minhash counts", ", ".join(f"{k.removeprefix('n_').replace('_', ' ')} "
                                                 f"{v:,}" if isinstance(v, int) else f"{k} {v}"
                                                 for k, v in sorted(c["minhash"].items()) if k != "storage"))
        st = c["minhash"].get("storage")
        if st and st.get("storage_format", 2) >= 3:  # the lossy parts and their computed error rates
            verify = ("signatures recomputed from the text store (exact 32-bit values)"
                      if st["verify"] == "text" else f"{st['signature_bits']}-bit stored signature values "
                      f"(similarity estimate bias <= {st['similarity_estimate_max_bias']:.1e})")
            head.add_row("minhash storage", (
                f"format {st['storage_format']}: band tables of {st['band_key_bits']}-bit band keys -> "
                f"docs ({st['dir_bits']} directory bits, {st['entry_bits']}-bit packed entries; "
                f"{st['chance_candidates_per_query']:.2g} chance candidate docs per query window, each "
                f"verified); {verify}"))
            sizes = sorted(st.get("bytes", {}).items())
            head.add_row("minhash bytes", ", ".join(f"{k} {v:,}" for k, v in sizes))
        elif st:
            head.add_row("minhash storage", (
                f"format {st['storage_format']}: {st['signature_bits']}-bit signature values (similarity "
                f"estimate bias <= {st['similarity_estimate_max_bias']:.1e}), {st['band_key_bits']}-bit "
                f"band keys ({st['chance_candidates_per_query']:.2g} chance candidates per query, "
                "each verified)"))
    from tcqa_data.decontam.textstore.store import store_summary

    ts = store_summary(index_dir)
    if ts is None:
        head.add_row("text store", "none")
    else:
        head.add_row("text store", (
            f"{ts['mode']} (version {ts['version']}): "
            + ", ".join(f"{k} {v:,} B" for k, v in ts["bytes"].items())
            + f"; {ts['anchor_entries']:,} anchors, 32-bit k-gram hashes: chance match "
              f"{ts['anchor_chance_match_rate']:.1e} per query k-gram (adds a candidate doc, checked by "
              "alignment)"))
    b = m.get("build", {})
    head.add_row("built", f"{b.get('finished', '?')} in {b.get('seconds', '?')} s, "
                          f"{b.get('workers', '?')} workers")
    sk = m.get("skipped", {}).get("counts", {})
    head.add_row("skipped", ", ".join(f"{k}: {v:,}" for k, v in sorted(sk.items())) or "none")
    for s in m.get("skipped_inputs", []):
        head.add_row("skipped input", f"{s['path']}: {s['reason']}")
    con.print(head)
    inputs = Table(title="inputs")
    for col in ("#", "format", "bytes", "docs", "first ordinal", "sha256", "skipped"):
        inputs.add_column(col)
    for i, e in enumerate(m["inputs"], 1):
        sk = e.get("skipped", {}).get("counts", {})
        inputs.add_row(str(i), e["format"], f"{e['size']:,}", f"{e['docs']:,}", f"{e['doc_offset']:,}",
                       e["sha256"][:16], ", ".join(f"{k} {v}" for k, v in sorted(sk.items())) or "")
    con.print(inputs)
    # whole paths, one per line, never shortened to fit the terminal (copyable)
    for i, e in enumerate(m["inputs"], 1):
        con.print(f"#{i} {e['path']}", soft_wrap=True, highlight=False, markup=False)
