"""Training curves as a PNG: loss, learning rate and validation BLEU against the optimizer step."""

from pathlib import Path


def plot_training_curves(log_history: list[dict], path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    def series(key):
        points = [(entry["step"], entry[key]) for entry in log_history if key in entry and "step" in entry]
        return [p[0] for p in points], [p[1] for p in points]

    panels = [("loss", "training loss"), ("learning_rate", "learning rate"), ("eval_bleu", "validation BLEU")]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, (key, title) in zip(axes, panels):
        steps, values = series(key)
        ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if not steps:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
