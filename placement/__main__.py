"""``python -m placement``: the same as the ``placement`` command."""

from placement.commands.main import run

if __name__ == "__main__":
    run()
