"""The figures and numbers of docs/diagnostics.md, produced by the package on real data (offline, ~2 min on 2 cores).

- GloVe 6B 50d (the Multi30k subset in ../shared/data/glove) on the word vocabulary of Multi30k
  English, through ``EmbeddingInitCallback.initialize`` (raw and standardized to Xavier): the
  histogram of s·X against P and the variance monitor's numbers (absorption, docs/concepts.md#absorption);
- ``lexical_probe`` of the GloVe subset on the analogy and similarity sets ([K] Table 4);
- a 2-D PCA scatter of chosen words: raw, raw + P and standardized + P, as the first layer sees them;
- learning curves of ``TiedEmbeddingLM`` (untied head, so [S]'s initial loss does not mix in) on Multi30k English
  from three starts, with
  ``LearningSpeedMonitor`` ([KB] Table 2).

    python examples/diagnostics_figures.py            # writes docs/figures/*.png, prints the tables
    python examples/diagnostics_figures.py --steps 300 --out /tmp/figures
"""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path

import lightning as L
import torch

from lightning_embinit import EmbeddingInitCallback, EmbeddingVarianceMonitor, LearningSpeedMonitor
from lightning_embinit.data import LanguageModelDataModule
from lightning_embinit.diagnostics import format_probe, lexical_probe, tensorboard_smooth
from lightning_embinit.diagnostics.figures import close, learning_curves, pca_scatter, value_histogram
from lightning_embinit.diagnostics.variance import positional_matrix, token_rows
from lightning_embinit.models import TiedEmbeddingLM

ROOT = Path(__file__).resolve().parent.parent
WORDS = [
    "man",
    "woman",
    "boy",
    "girl",
    "dog",
    "cat",
    "horse",
    "red",
    "blue",
    "green",
    "white",
    "black",
    "walking",
    "running",
    "sitting",
    "standing",
    "street",
    "beach",
    "water",
    "snow",
]
STARTS = {  # name → EmbeddingInitCallback options
    "xavier": {"source": "xavier"},
    "glove": {"source": "glove"},
    "glove standardized": {"source": "glove", "standardize": "xavier"},
}


def shared_data() -> Path:
    return Path(os.environ.get("EMBINIT_SHARED_DATA", ROOT.parent / "shared" / "data"))


def save(figure, path: Path) -> None:
    figure.savefig(path, dpi=80)
    close(figure)
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


def model_for(data: LanguageModelDataModule) -> TiedEmbeddingLM:
    return TiedEmbeddingLM(
        vocabulary=data.vocabulary,
        architecture={
            "d_model": 50,
            "num_heads": 2,
            "num_layers": 2,
            "ffn_dim": 200,
            "max_len": 64,
            "positional": "sinusoidal",
            "head": "untied",
            "dropout": 0.1,
        },
        optimizer={"lr": 2e-3},
    )


def initialized(data: LanguageModelDataModule, options: dict, glove: str) -> TiedEmbeddingLM:
    options = {**options, "source": f"file:{glove}" if options["source"] == "glove" else options["source"]}
    torch.manual_seed(0)
    model = model_for(data)
    EmbeddingInitCallback(**options, seed=0, verbose=False).initialize(model, datamodule=data)
    return model


def absorption_figures(data: LanguageModelDataModule, glove: str, out: Path) -> None:
    monitor = EmbeddingVarianceMonitor()
    print("\nstart                 std     scaled std  PE std  ratio   semantic ret.  positional ret.  NN survival")
    panels = {}
    for name in ("glove", "glove standardized", "xavier"):
        model = initialized(data, STARTS[name], glove)
        slot = model.embedding_slots()["tokens"]
        numbers = monitor.measure(model)["tokens"]
        print(
            f"{name:<20}  {numbers['std']:.4f}  {numbers['scaled_std']:.4f}      {numbers['pe_std']:.3f}   "
            f"{numbers['ratio']:6.3f}  {numbers['semantic_retention']:.3f}          "
            f"{numbers['positional_retention']:.3f}"
            f"            {numbers['neighbour_survival']:.3f}"
        )
        if name != "xavier":
            scaled = token_rows(slot) * float(slot.input_scale)
            title = f"Multi30k words, {name}: s·X (s = √50) against sinusoidal P"
            save(
                value_histogram(scaled, positional_matrix(slot), title=title),
                out / f"histogram_{name.replace(' ', '_')}.png",
            )
        index = {token: row for row, token in enumerate(slot.tokens)}
        rows = torch.tensor([index[w] for w in WORDS])
        positions = torch.randint(0, 64, (len(WORDS),), generator=torch.Generator().manual_seed(0))
        vectors = slot.weight.detach()[rows]
        if name == "glove":
            panels["GloVe x"] = vectors
        if name != "xavier":
            panels[f"{name}: √50·x + P"] = vectors * float(slot.input_scale) + positional_matrix(slot)[positions]
    save(
        pca_scatter(panels, WORDS, title="2-D PCA of 20 Multi30k words (P at random positions < 64)"),
        out / "pca_glove.png",
    )


def probe_table(glove: str) -> None:
    from gensim.models import KeyedVectors

    lexical = shared_data() / "lexical"
    vectors = KeyedVectors.load_word2vec_format(glove, binary=False)
    results = lexical_probe(
        torch.from_numpy(vectors.vectors),
        vectors.index_to_key,
        analogies=str(lexical / "questions-words.txt"),
        similarity=[str(lexical / "wordsim353.tsv"), str(lexical / "simlex999.txt")],
        chains=[
            "raw",
            "scaled",
            "raw+pe",
            "standardized",
            "standardized+scaled",
            "standardized+pe",
            "raw+pe_scaled",
            "scaled+pe",
        ],
    )
    print("\nlexical_probe, GloVe 6B 50d Multi30k subset (11,067 words), all 19,544 questions:")
    print(format_probe(results))


class Record(L.Callback):
    def __init__(self, speed: LearningSpeedMonitor, points: list[tuple[int, float]]) -> None:
        self.speed, self.points = speed, points

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self.points.append((self.speed.examples_seen, float(trainer.callback_metrics["val_loss"])))


def learning_speed(data: LanguageModelDataModule, glove: str, out: Path, steps: int, threshold: float) -> None:
    curves, crossings = {}, {}
    print(
        f"\nexamples until the smoothed val_loss ≤ {threshold} (TiedEmbeddingLM d=50, untied head, Multi30k English):"
    )
    for name, options in STARTS.items():
        model = initialized(data, options, glove)
        speed = LearningSpeedMonitor("val_loss", threshold, mode="min")
        points: list[tuple[int, float]] = []
        trainer = L.Trainer(
            max_steps=steps,
            val_check_interval=25,
            check_val_every_n_epoch=None,
            limit_val_batches=10,
            num_sanity_val_steps=0,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[speed, Record(speed, points)],
        )
        torch.manual_seed(0)
        trainer.fit(model, datamodule=data)
        examples = [e for e, _ in points]
        losses = [v for _, v in points]
        curves[name] = (examples, losses, tensorboard_smooth(losses))
        crossings[name] = speed.crossed_at_examples
        print(
            f"  {name:<20} {speed.crossed_at_examples if speed.crossed_at_examples else 'not reached':>12}   "
            f"final val_loss {losses[-1]:.3f}"
        )
    figure = learning_curves(curves, threshold=threshold, metric="val_loss", crossings=crossings)
    figure.axes[0].set_title("LM (d = 50, untied head) on Multi30k English: validation loss, smoothed 0.6", fontsize=10)
    save(figure, out / "learning_speed_multi30k.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "docs" / "figures"))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--threshold", type=float, default=4.5)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    glove = str(shared_data() / "glove" / "glove.6B.50d.multi30k_subset.txt.gz")
    multi30k = shared_data() / "multi30k"
    data = LanguageModelDataModule(
        train_files=str(multi30k / "train.en.gz"),
        val_files=str(multi30k / "val.en.gz"),
        seq_len=32,
        batch_size=32,
        min_freq=2,
    )
    print(f"Multi30k English vocabulary: {len(data.vocabulary)} words (min_freq 2)")
    absorption_figures(data, glove, out)
    probe_table(glove)
    learning_speed(data, glove, out, args.steps, args.threshold)


if __name__ == "__main__":
    main()
