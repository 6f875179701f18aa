"""``python -m placement.trainer``: the reference trainer (placement.trainer.cli).

SIGTERM is handled from here on, before NumPy, PyTorch and the corpus load (placement.trainer.notice)."""

from placement.trainer.notice import install

install()

from placement.trainer.cli import main  # noqa: E402 - after the handler: a SIGTERM while importing is a notice

if __name__ == "__main__":
    main()
