"""TensorBoard logging: heatmap images, attention statistics, and what TensorBoard reads back."""

from __future__ import annotations

import io
import math
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from PIL import Image
from run_helpers import events, poll, request, tensorboard_server

from seq2seq.config import Config, Multi30kConfig, TokenizerConfig
from seq2seq.data.stream import from_lists
from seq2seq.data.tokenizer import train_tokenizers
from seq2seq.decoding import heatmap
from seq2seq.decoding.alignment import AttentionSample, attention_sample, attention_statistics
from seq2seq.decoding.heatmap import Heatmap as _Heatmap
from seq2seq.decoding.heatmap import attention_figure
from seq2seq.decoding.monitor import Monitor, run_hparams
from seq2seq.decoding.search import Hypothesis
from seq2seq.model.config import BahdanauConfig, LuongConfig, ModelConfig, MultiHeadConfig
from seq2seq.storage.rundir import TENSORBOARD_DIR
from seq2seq.vocab import EOS

STEPS = (100, 200)
BLEU = {"0_bahdanau": 21.5, "1_multihead": 24.0}  # best validation BLEU of each run
TEST_BLEU = 19.25  # logged into run 0 afterwards, as evaluation would


def normalised(rng: np.random.Generator, *shape: int) -> np.ndarray:
    weights = rng.random(shape)
    return weights / weights.sum(axis=-1, keepdims=True)


def pieces(n: int, prefix: str) -> list[str]:
    return [f"▁{prefix}{i}" for i in range(n - 1)] + ["</s>"]


# -- heatmap ---------------------------------------------------------------------------------


def test_image_grows_with_token_count_and_is_bounded() -> None:
    rng = np.random.default_rng(0)
    shapes = []
    for n in (3, 10, 30, 300):
        image = attention_figure(normalised(rng, n, n), pieces(n, "s"), pieces(n, "t"), "t")
        assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
        shapes.append(image.shape[:2])
    for (h0, w0), (h1, w1) in zip(shapes[:2], shapes[1:3], strict=True):
        assert h1 > h0 and w1 > w0
    assert max(shapes[3]) <= 1600  # 16 inches at 100 dpi however long the sentence
    wide = attention_figure(normalised(rng, 3, 30), pieces(30, "s"), pieces(3, "t"))
    tall = attention_figure(normalised(rng, 30, 3), pieces(3, "s"), pieces(30, "t"))
    assert wide.shape[1] > wide.shape[0] and tall.shape[0] > tall.shape[1]


@pytest.mark.filterwarnings("error")  # a missing-glyph warning would fail here
@pytest.mark.parametrize(
    ("src", "tgt"),
    [
        (["▁Hallo"], ["</s>"]),
        (["</s>"], ["▁Hello", "▁world", "</s>"]),
        (["▁Größe", "▁Übermäßig", "ß", "</s>"], ["▁size", "</s>"]),
        (["▁Příliš", "▁žluťoučký", "▁kůň", "</s>"], ["▁Too", "▁yellow", "</s>"]),
        (["▁日本語", "の", "文", "</s>"], ["▁東京", "▁한국어", "</s>"]),
        (["▁$x$", "$", "\\frac", "", "▁" + "lang" * 20, "</s>"], ["▁a_b", "^", "</s>"]),
    ],
    ids=["one-token", "one-source-token", "german", "czech", "cjk", "mathtext-like"],
)
def test_heatmap_never_crashes_on_short_or_non_ascii_tokens(src: list[str], tgt: list[str]) -> None:
    weights = normalised(np.random.default_rng(1), len(tgt), len(src))
    image = attention_figure(weights, src, tgt, "val 0, step 1 · ü 日本")
    assert image.dtype == np.uint8 and image.shape[2] == 3
    assert image.min() < 100 < image.max()  # something was drawn on the white background


def test_rerendering_a_heatmap_equals_drawing_it_afresh() -> None:
    rng = np.random.default_rng(2)
    src, tgt = pieces(7, "s"), pieces(5, "t")
    first, second = normalised(rng, 5, 7), np.eye(5, 7)
    heatmap = _Heatmap(src, tgt)
    image_first = heatmap.render(first, "first")
    image_second = heatmap.render(second, "second")
    assert not np.array_equal(image_first, image_second)
    np.testing.assert_array_equal(image_second, attention_figure(second, src, tgt, "second"))


def test_heatmap_rejects_weights_that_do_not_match_the_tokens() -> None:
    with pytest.raises(ValueError, match="do not match"):
        attention_figure(np.ones((2, 3)), pieces(2, "s"), pieces(2, "t"))


# -- statistics ------------------------------------------------------------------------------


def test_statistics_of_uniform_and_one_hot_attention() -> None:
    uniform = attention_statistics([np.full((4, 5), 0.2), np.full((2, 5), 0.2)])
    assert uniform["attention_entropy"] == pytest.approx(math.log(5))
    assert uniform["attention_max_weight"] == pytest.approx(0.2)
    one_hot = attention_statistics([np.eye(3, 4), np.eye(2)])
    assert one_hot["attention_entropy"] == pytest.approx(0.0, abs=1e-12)
    assert one_hot["attention_max_weight"] == pytest.approx(1.0)


def test_statistics_average_over_target_tokens_and_ignore_padding_zeros() -> None:
    padded = np.array([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]])  # third position is padding
    one_hot = np.eye(3)[[0, 1, 2, 0, 1, 2]]
    stats = attention_statistics([padded, one_hot])
    assert stats["attention_entropy"] == pytest.approx(2 * math.log(2) / 8)
    assert stats["attention_max_weight"] == pytest.approx((2 * 0.5 + 6) / 8)
    heads = attention_statistics([np.stack([np.full((2, 4), 0.25), np.eye(2, 4)])])
    assert heads["attention_entropy"] == pytest.approx(math.log(4) / 2)
    with pytest.raises(ValueError):
        attention_statistics([])


# -- samples and hparams ---------------------------------------------------------------------


def test_sample_checks_its_shapes_and_drops_a_single_head_axis() -> None:
    sample = AttentionSample("a", "b", "c", pieces(3, "s"), pieces(2, "t"), np.ones((1, 2, 3)))
    assert sample.weights.shape == (2, 3)
    with pytest.raises(ValueError, match="2 target and 4 source"):
        AttentionSample("a", "b", "c", pieces(4, "s"), pieces(2, "t"), np.ones((2, 3)))


def test_sample_of_a_hypothesis_labels_every_attention_row_and_column(tmp_path: Path) -> None:
    verbs = [("gehen", "walk"), ("laufen", "run"), ("sitzen", "sit"), ("stehen", "stand")] * 5
    src_lines = [f"Zwei Männer {de} am Strand, Nummer {i}." for i, (de, _) in enumerate(verbs)]
    tgt_lines = [f"Two men {en} on the beach, number {i}." for i, (_, en) in enumerate(verbs)]
    data = Multi30kConfig(
        cache_dir=str(tmp_path / "cache"), tokenizer=TokenizerConfig(vocab_size=60)
    )
    src_tok, tgt_tok = train_tokenizers(data, from_lists(src_lines, tgt_lines), tmp_path)
    src_ids = [*src_tok.encode(src_lines[0]), EOS]
    tokens = tgt_tok.encode(tgt_lines[0])
    rows, cols = len(tokens) + 1, len(src_ids)  # search reports an EOS row
    heads = torch.softmax(torch.randn(3, rows, cols), dim=-1)

    for head_attention in (None, heads):
        hypothesis = Hypothesis(tokens, -1.0, heads.mean(0), head_attention)
        sample = attention_sample(src_lines[0], tgt_lines[0], hypothesis, src_ids, src_tok, tgt_tok)
        assert sample.hypothesis == tgt_lines[0]
        assert (
            sample.source_pieces == src_tok.pieces(src_ids) and sample.source_pieces[-1] == "</s>"
        )
        assert sample.target_pieces == [*tgt_tok.pieces(tokens), "</s>"]
        expected = heads.mean(0) if head_attention is None else heads
        np.testing.assert_allclose(sample.weights, expected.numpy())


def test_run_hparams_have_the_same_keys_for_every_attention_type() -> None:
    def config(attention) -> Config:
        cfg = Config(data=Multi30kConfig(), model=ModelConfig(attention=attention))
        return OmegaConf.structured(cfg)

    bahdanau = run_hparams(config(BahdanauConfig()))
    luong = run_hparams(config(LuongConfig()))
    multihead = run_hparams(config(MultiHeadConfig(heads=4)))
    assert bahdanau.keys() == luong.keys() == multihead.keys()
    assert sorted(bahdanau)[:3] == ["attention", "attention_heads", "attention_score"]
    assert [bahdanau[k] for k in sorted(bahdanau)[:3]] == ["bahdanau", 1, "-"]
    assert (luong["attention"], luong["attention_score"]) == ("luong", "general")
    assert (multihead["attention"], multihead["attention_heads"]) == ("multihead", 4)
    assert all(isinstance(v, (int, float, str, bool)) for v in luong.values())


# -- event files: TensorBoard's reader and server --------------------------------------------


def write_run(run_dir: Path, heads: int, seed: int) -> None:
    """Two validations of a small run: scalars, heatmaps, the samples table and hparams."""
    rng = np.random.default_rng(seed)
    heads_axis = (heads,) if heads > 1 else ()
    params = {"attention": run_dir.name.split("_")[1], "lr": 1e-3, "heads": heads, "tie": False}
    with Monitor(run_dir) as monitor:
        for k, step in enumerate(STEPS):
            samples = [
                AttentionSample(
                    source="Zwei Männer | am Strand.",
                    reference="Two men on the beach.",
                    hypothesis=f"Two *men* at step {step}",
                    source_pieces=pieces(6, "s"),
                    target_pieces=pieces(4 + i, "t"),
                    weights=normalised(rng, *heads_axis, 4 + i, 6),
                )
                for i in range(2)
            ]
            stats = attention_statistics([s.weights for s in samples])
            monitor.scalars(
                step, {"train/loss": 5.0 - k, **{f"valid/{n}": v for n, v in stats.items()}}
            )
            monitor.attention(step, samples)
            monitor.samples_table(step, samples)
            bleu = BLEU[run_dir.name] - (len(STEPS) - 1 - k)
            monitor.hparams(step, params, {"hparams/best_valid_bleu": bleu})


def test_heatmaps_drawn_on_the_monitors_thread_are_all_written_by_close(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """wait=False (a training's validations) writes the images wait=True writes, once closed; a
    heatmap that cannot be drawn is said in the log, not raised."""
    rng = np.random.default_rng(0)
    samples = [
        AttentionSample("s", "r", "h", pieces(6, "s"), pieces(4, "t"), normalised(rng, 2, 4, 6))
    ]
    for wait in (True, False):
        with Monitor(tmp_path / str(wait)) as monitor:
            for step in STEPS:
                monitor.attention(step, samples, wait=wait)
    drawn, waited = events(tmp_path / "False"), events(tmp_path / "True")
    assert drawn.Tags()["images"] == waited.Tags()["images"]
    for tag in waited.Tags()["images"]:
        got = [(e.step, e.encoded_image_string) for e in drawn.Images(tag)]
        assert got == [(e.step, e.encoded_image_string) for e in waited.Images(tag)]
        assert [step for step, _ in got] == list(STEPS)

    def broken(*args):
        raise RuntimeError("no fonts")

    monkeypatch.setattr(_Heatmap, "render", broken)
    with Monitor(tmp_path / "broken") as monitor, caplog.at_level("WARNING"):
        monitor.attention(STEPS[0], samples, wait=False)
    assert "were not drawn: no fonts" in caplog.text


def test_characters_drawn_as_boxes_are_said_once_a_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A machine without a CJK font draws Chinese pieces as boxes: the log says so, once."""
    latin_only = frozenset([*range(0x250), ord("▁")])
    monkeypatch.setattr(heatmap, "_glyphs", lambda: latin_only)
    rng = np.random.default_rng(0)
    latin = AttentionSample("s", "r", "h", pieces(3, "s"), pieces(2, "t"), normalised(rng, 2, 3))
    chinese = AttentionSample(
        "你好。",
        "Hi.",
        "Hello.",
        ["▁你", "好", "。", "</s>"],
        ["▁Hello", ".", "</s>"],
        np.eye(3, 4),
    )
    with Monitor(tmp_path) as monitor, caplog.at_level("WARNING"):
        monitor.attention(STEPS[0], [latin])
        assert "boxes" not in caplog.text
        for step in STEPS:
            monitor.attention(step, [latin, chinese])
    said = [r.getMessage() for r in caplog.records if "boxes" in r.getMessage()]
    assert len(said) == 1 and "3 characters as boxes (你 好 。)" in said[0]
    assert "fonts-noto-cjk" in said[0] and str(heatmap.font_list()) in said[0]


@pytest.fixture(scope="module")
def multirun(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A multirun parent: a single-head and a two-head run; run 0 later gets a test BLEU."""
    parent = tmp_path_factory.mktemp("multirun")
    write_run(parent / "0_bahdanau", heads=1, seed=0)
    write_run(parent / "1_multihead", heads=2, seed=1)
    with Monitor(parent / "0_bahdanau") as evaluation:  # a separate process in real use
        params = {"attention": "bahdanau", "lr": 1e-3, "heads": 1, "tie": False}
        evaluation.hparams(STEPS[-1], params, {"hparams/test_bleu": TEST_BLEU})
    return parent


def test_event_accumulator_reads_images_text_scalars_and_hparams(multirun: Path) -> None:
    single, multi = events(multirun / "0_bahdanau"), events(multirun / "1_multihead")
    assert set(single.Tags()["images"]) == {"attention/val_0", "attention/val_1"}
    assert set(multi.Tags()["images"]) == {
        f"attention/val_{i}{head}" for i in range(2) for head in ("", "/head_0", "/head_1")
    }
    images = single.Images("attention/val_1")
    assert [e.step for e in images] == list(STEPS)
    decoded = Image.open(io.BytesIO(images[0].encoded_image_string))
    assert decoded.size == (images[0].width, images[0].height) and decoded.mode == "RGB"

    texts = single.Tensors("samples/text_summary")
    assert [e.step for e in texts] == list(STEPS)
    table = texts[-1].tensor_proto.string_val[0].decode()
    assert "| | source | reference | hypothesis |" in table
    assert "Zwei Männer \\| am Strand." in table and "Two \\*men\\* at step 200" in table
    assert len(table.splitlines()) == 2 + 2

    scalar_tags = set(single.Tags()["scalars"])
    assert {"train/loss", "valid/attention_entropy", "valid/attention_max_weight"} <= scalar_tags
    assert [e.value for e in single.Scalars("hparams/best_valid_bleu")] == [20.5, 21.5]
    assert [e.value for e in single.Scalars("hparams/test_bleu")] == [TEST_BLEU]
    assert set(single.PluginTagToContent("hparams")) == {
        "_hparams_/experiment",
        "_hparams_/session_start_info",
        "_hparams_/session_end_info",
    }
    # Event files only: no timestamped hparams subfolder as SummaryWriter.add_hparams makes.
    assert all(p.is_file() for p in (multirun / "0_bahdanau" / TENSORBOARD_DIR).iterdir())


def test_purge_step_hides_what_an_interrupted_run_logged_after_its_checkpoint(
    tmp_path: Path,
) -> None:
    with Monitor(tmp_path) as monitor:
        for step in (10, 20, 30):
            monitor.scalars(step, {"train/loss": float(step)})
    with Monitor(tmp_path, purge_step=20) as resumed:
        resumed.scalars(20, {"train/loss": -20.0})
    values = [(e.step, e.value) for e in events(tmp_path).Scalars("train/loss")]
    assert values == [(10, 10.0), (20, -20.0)]


@pytest.fixture(scope="module")
def tensorboard_url(multirun: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """TensorBoard over the synthetic multirun parent."""
    output = tmp_path_factory.mktemp("tensorboard_server") / "stderr.txt"
    with tensorboard_server(multirun, output) as url:
        yield url


RUN0, RUN1 = f"0_bahdanau/{TENSORBOARD_DIR}", f"1_multihead/{TENSORBOARD_DIR}"


def test_tensorboard_server_lists_attention_image_tags(tensorboard_url: str) -> None:
    tags = poll(f"{tensorboard_url}/data/plugin/images/tags", lambda t: {RUN0, RUN1} <= set(t))
    assert set(tags[RUN0]) == {"attention/val_0", "attention/val_1"}
    assert {"attention/val_0", "attention/val_0/head_1"} <= set(tags[RUN1])
    query = urllib.parse.urlencode({"run": RUN1, "tag": "attention/val_0/head_1"})
    images = request(f"{tensorboard_url}/data/plugin/images/images?{query}")
    assert [image["step"] for image in images] == list(STEPS)


def test_tensorboard_hparams_tab_compares_both_runs(tensorboard_url: str) -> None:
    hparams = f"{tensorboard_url}/data/plugin/hparams"
    experiment = poll(f"{hparams}/experiment", lambda e: e.get("hparamInfos"), {})
    assert {h["name"] for h in experiment["hparamInfos"]} == {"attention", "lr", "heads", "tie"}
    metric_tags = {m["name"]["tag"] for m in experiment["metricInfos"]}
    assert metric_tags == {"hparams/best_valid_bleu", "hparams/test_bleu"}

    body = {"startIndex": 0, "sliceSize": 100, "allowedStatuses": ["STATUS_SUCCESS"]}
    groups = poll(f"{hparams}/session_groups", lambda g: g.get("totalSize") == 2, body)
    found = {}
    for group in groups["sessionGroups"]:
        metrics = {m["name"]["tag"]: m["value"] for m in group["metricValues"]}
        found[group["name"]] = (group["hparams"]["attention"], metrics)
    assert found == {
        RUN0: ("bahdanau", {"hparams/best_valid_bleu": 21.5, "hparams/test_bleu": TEST_BLEU}),
        RUN1: ("multihead", {"hparams/best_valid_bleu": 24.0}),
    }
