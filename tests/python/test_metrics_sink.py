"""TensorBoard event files from the log_metrics activity, read back with tensorboard's own reader."""

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from trainer.worker.metrics_sink import LogMetricsInput, log_metrics


def test_metrics_reach_tensorboard(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    for step, reward in [(0, 0.125), (1, 0.5)]:
        out = log_metrics(
            LogMetricsInput(
                run_id="r",
                run_dir=str(tmp_path),
                step=step,
                metrics={"rollout/raw_reward": reward, "train/pg_loss": -0.1},
            )
        )
        assert out.wandb is False
    acc = EventAccumulator(out.tensorboard)
    acc.Reload()
    assert [(e.step, round(e.value, 3)) for e in acc.Scalars("rollout/raw_reward")] == [(0, 0.125), (1, 0.5)]
    assert "train/pg_loss" in acc.Tags()["scalars"]
