"""``python -m attnlab`` (how the lab starts training processes)."""

from attnlab.cli import main

if __name__ == "__main__":
    main()
