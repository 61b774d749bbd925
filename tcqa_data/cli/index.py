"""CLI commands of this stage (registered on the shared Typer app): index-corpus, index-info."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from tcqa_data.cli import app
from tcqa_data.errors import ConfigError


def _parse_ngrams(value: str) -> list[int]:
    try:
        ns = [int(x) for x in value.replace(" ", "").split(",") if x]
    except ValueError as e:
        raise ConfigError(f"--ngram takes sizes like 13 or 8,13, not {value!r}") from e
    if not ns or min(ns) < 1:
        raise ConfigError(f"--ngram takes positive sizes like 13 or 8,13, not {value!r}")
    return ns


@app.command("index-corpus")
def index_corpus(
    corpus: list[str] = typer.Argument(None, help="Corpus files, globs or folders (.jsonl[.gz|.zst], "
                                                  ".parquet, .txt)."),
    out: Path = typer.Option(..., "--out", help="Index folder to create (or extend with --append)."),
    ngram: str = typer.Option("13", "--ngram", help="N-gram size(s), e.g. 13 or 8,13."),
    normalization: str = typer.Option("janitor", "--normalization",
                                      help="janitor (exactly lm-eval's Janitor) or unicode."),
    text_field: str = typer.Option("text", "--text-field", help="Field holding the document text."),
    id_field: str = typer.Option(None, "--id-field", help="Field used as doc ref (default: file:line)."),
    hf_dataset: str = typer.Option(None, "--hf-dataset", help="Stream a Hugging Face dataset instead."),
    hf_config: str = typer.Option(None, "--hf-config", help="Its config name."),
    hf_split: str = typer.Option("train", "--hf-split", help="Its split."),
    workers: int = typer.Option(None, "--workers", help="Local worker processes (default: all cores)."),
    append: bool = typer.Option(False, "--append", help="Add new inputs to an existing index."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing index."),
    on_error: str = typer.Option("raise", "--on-error", help="raise: stop at a bad record; skip: count it."),
    no_minhash: bool = typer.Option(False, "--no-minhash", help="Build only the n-gram index."),
    num_perm: int = typer.Option(128, "--num-perm", help="MinHash permutations."),
    provenance: int = typer.Option(2, "--provenance", help="Doc ordinals kept per n-gram (index size)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
    engine: str = typer.Option("local", "--engine",
                               help="local: worker processes on this machine; ray: Ray tasks "
                                    "(pip install 'tcqa-data\\[ray]'; see docs/CLUSTER.md)."),
    ray_address: str = typer.Option(None, "--ray-address",
                                    help="With --engine ray: auto, HOST:PORT or ray://HOST:PORT of a "
                                         "running cluster (default: start a local Ray instance "
                                         "with --workers CPUs)."),
) -> None:
    """Index a training corpus: n-gram hashes (exact matches) and MinHash windows (near-duplicates)."""
    from tcqa_data.decontam.build import build_index

    manifest = build_index(
        corpus or [], out, ngram_sizes=_parse_ngrams(ngram), normalization=normalization,
        text_field=text_field, id_field=id_field, workers=workers, append=append, overwrite=overwrite,
        on_error=on_error, minhash=not no_minhash, num_perm=num_perm, quiet=quiet,
        hf_dataset=hf_dataset, hf_config=hf_config, hf_split=hf_split, provenance=provenance,
        engine=engine, ray_address=ray_address,
    )
    c = manifest["counts"]
    grams = ", ".join(f"{n}-grams {v['unique']:,}" for n, v in c["ngrams"].items())
    skipped = manifest.get("skipped", {}).get("counts", {})
    msg = f"indexed {c['docs']:,} docs from {c['inputs']} input(s) into {out}: {grams}"
    if skipped:
        msg += "; skipped " + ", ".join(f"{k} {v:,}" for k, v in sorted(skipped.items()))
    typer.echo(msg, err=True)


@app.command("index-info")
def index_info(
    index_dir: Path = typer.Argument(..., help="An index folder built by index-corpus."),
    as_json: bool = typer.Option(False, "--json", help="Print the raw manifest JSON."),
) -> None:
    """Describe an index: parameters, inputs, counts, skipped records."""
    from tcqa_data.decontam.build import index_info as load

    m = load(index_dir)
    if as_json:
        typer.echo(json.dumps(m, indent=2, sort_keys=True))
        return
    from rich.console import Console
    from rich.table import Table

    con = Console()
    c = m["counts"]
    head = Table(title=f"index {index_dir}", show_header=False)
    head.add_row("format version", str(m["format_version"]))
    head.add_row("normalization", m["normalization"])
    head.add_row("n-gram sizes", ", ".join(map(str, m["ngram_sizes"])))
    head.add_row("hash", f"{m['hash']['name']} seed {m['hash']['seed']}")
    head.add_row("buckets / provenance", f"{m['num_buckets']} / first {m['provenance_docs']} docs")
    head.add_row("fields", f"text {m['text_field']!r}, id {m['id_field']!r}")
    head.add_row("minhash", json.dumps(m["minhash"], sort_keys=True) if m["minhash"] else "off")
    head.add_row("docs", f"{c['docs']:,} ({c['input_bytes']:,} input bytes)")
    for n, v in c["ngrams"].items():
        head.add_row(f"{n}-grams", f"{v['unique']:,} unique of {v['total']:,}")
    if "minhash" in c:
        head.add_row("minhash counts", json.dumps(c["minhash"], sort_keys=True))
    b = m.get("build", {})
    head.add_row("built", f"{b.get('finished', '?')} in {b.get('seconds', '?')} s, "
                          f"{b.get('workers', '?')} workers")
    sk = m.get("skipped", {}).get("counts", {})
    head.add_row("skipped", ", ".join(f"{k}: {v:,}" for k, v in sorted(sk.items())) or "none")
    for s in m.get("skipped_inputs", []):
        head.add_row("skipped input", f"{s['path']}: {s['reason']}")
    con.print(head)
    inputs = Table(title="inputs")
    for col in ("path", "format", "bytes", "docs", "first ordinal", "sha256", "skipped"):
        inputs.add_column(col)
    for e in m["inputs"]:
        sk = e.get("skipped", {}).get("counts", {})
        inputs.add_row(e["path"], e["format"], f"{e['size']:,}", f"{e['docs']:,}", f"{e['doc_offset']:,}",
                       e["sha256"][:16], ", ".join(f"{k} {v}" for k, v in sorted(sk.items())) or "")
    con.print(inputs)
