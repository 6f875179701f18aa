"""``python -m placement.trainer``: the reference trainer (placement.trainer.cli)."""

from placement.trainer.cli import main

if __name__ == "__main__":
    main()
