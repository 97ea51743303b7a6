"""``python -m services.naive_server --model PATH --port N ...`` (see :mod:`.cli`)."""

from services.naive_server.cli import main

main()
