"""``python -m placement``: the same as the ``placement`` command."""

from placement.cli import run

if __name__ == "__main__":
    run()
