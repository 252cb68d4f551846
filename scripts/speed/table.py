"""The benchmark's table: one line per training or decoding row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from seq2seq.config import DecodeConfig
from seq2seq.runtime.profiling import describe

TRAINING_COLUMNS = (
    ("attention", "<13", lambda r: r["attention"]),
    ("prec", "<5", lambda r: r["precision"]),
    ("products", "<9", lambda r: r["products"]),
    ("batch", "<7", lambda r: r["batch"]),
    ("graphs", "<6", lambda r: r.get("cuda_graphs", "false")),
    ("budget", ">7", lambda r: f"{r['batch_tokens']}"),
    ("tok/b", ">7", lambda r: f"{r['mean_target_tokens']:.0f}"),
    ("sent/b", ">7", lambda r: f"{r['mean_sentences']:.1f}"),
    ("real", ">5", lambda r: f"{r['real_share']:.0%}"),
    ("tok/s", ">9", lambda r: f"{r['tokens_per_s']:,.0f}"),
    ("min", ">8", lambda r: f"{r['tokens_per_s_min']:,.0f}"),
    ("max", ">8", lambda r: f"{r['tokens_per_s_max']:,.0f}"),
    ("MFLOP/tok", ">10", lambda r: f"{r['flops_per_token'] / 1e6:.1f}"),
    ("%peak", ">7", lambda r: f"{r['peak_share']:.1%}"),
    ("RSS MiB", ">9", lambda r: f"{r['peak_rss_mib']:,.0f}"),
)


DECODING_COLUMNS = (
    ("attention", "<19", lambda r: r["attention"]),
    ("search", "<7", lambda r: r["search"]),
    ("batch", ">5", lambda r: r.get("batch_size", DecodeConfig.batch_size)),
    ("graphs", ">7", lambda r: r.get("cuda_graphs", "false")),
    (
        "ms/batch ",
        ">10",
        lambda r: f"{r.get('ms_per_batch', float('nan')):.1f} ",
    ),  # a space before prec
    ("prec", "<5", lambda r: r["precision"]),
    ("products", "<9", lambda r: r["products"]),
    ("sent/s", ">8", lambda r: f"{r['sentences_per_s']:,.1f}"),
    ("min", ">8", lambda r: f"{r['sentences_per_s_min']:,.1f}"),
    ("max", ">8", lambda r: f"{r['sentences_per_s_max']:,.1f}"),
    ("out len", ">8", lambda r: f"{r['mean_output_len']:.1f}"),
    ("words", ">6", lambda r: f"{r['mean_output_words']:.1f}"),
    ("words/s", ">8", lambda r: f"{r['words_per_s']:,.0f}"),
    ("max len", ">8", lambda r: f"{r['mean_max_len']:.1f}"),
    ("BLEU", ">6", lambda r: f"{r['bleu']:.1f}"),
    ("GFLOP/sent", ">11", lambda r: f"{r['flops_per_sentence'] / 1e9:.3f}"),
    ("%peak", ">7", lambda r: f"{r['peak_share']:.1%}"),
    ("RSS MiB", ">9", lambda r: f"{r['peak_rss_mib']:,.0f}"),
)


def print_rows(columns: Sequence[tuple[str, str, Any]], rows: list[dict[str, Any]]) -> None:
    """A header and one line per row; a column is (header, alignment and width, cell text)."""
    print("".join(f"{header:{spec}}" for header, spec, _ in columns))
    for row in rows:
        print("".join(f"{cell(row):{spec}}" for _, spec, cell in columns))


def print_table(report: dict[str, Any]) -> None:
    """The human-readable summary of the report."""
    peaks = ", ".join(f"{p} {g:,.1f}" for p, g in report["matmul_peak_gflops"].items())
    model, timing = report["model"], report["timing"]
    print(
        f"torch {report['torch']}, {report['threads']} threads, {report['cpu']} "
        f"({report['cpu_capability']}; native bf16: {report['native_bf16']}, "
        f"AMX: {report['amx']})"
    )
    print(f"matmul peak (best product over the model's shapes), GFLOP/s: {peaks}")
    print(f"memory: {report['memory']}")
    print(
        f"model: emb {model['emb_size']}, BiGRU {model['hidden_size']}/direction x "
        f"{model['encoder_layers']}, attention {model['attention_size']}, dropout "
        f"{model['dropout']}; {model['tokenizer']} vocab {model['src_vocab']}/"
        f"{model['tgt_vocab']}; {report['train_pairs']:,} training pairs, "
        f"{report['train_target_tokens']:,} target tokens; RSS: peak per "
        f"{report['peak_rss_scope']}"
    )
    if "training" in report:
        print(
            f"\ntraining: target tokens (incl. EOS) per second of forward + backward + clip + "
            f"Adam, median of {timing['windows']} windows of {timing['window']} batches after "
            f"{timing['warmup']} warm-up batches; tok/b, sent/b, real: per batch over an epoch"
        )
        print_rows(TRAINING_COLUMNS, report["training"])
    if "decoding" in report:
        rows = report["decoding"]
        if rows[0]["model"] == "trained":
            what = f"the trained run {rows[0]['run_dir']}"
        else:
            what = "RANDOM models (max-length output: pessimistic; --run-dir for a trained one)"
        print(
            f"\ndecoding {rows[0]['sentences']} test sentences (each precision's autocast, "
            f"batches of "
            f"{DecodeConfig.batch_size}, max length {DecodeConfig.max_len_a} x source + "
            f"{DecodeConfig.max_len_b}), median of {timing['passes']} passes: {what}"
        )
        print_rows(DECODING_COLUMNS, rows)
    print_profiles(report)


def print_profiles(report: dict[str, Any]) -> None:
    """Each profiled row's operators (``--profile``)."""
    for kind, unit, keys in (
        ("training", "target tokens", ("attention", "precision", "batch", "products")),
        ("decoding", "output pieces", ("attention", "search", "precision", "products")),
    ):
        for row in report.get(kind, []):
            if "profile" in row:
                what = " ".join([kind, *(str(row[key]) for key in keys)])
                print("\n" + "\n".join(describe(row["profile"], what, unit)))
