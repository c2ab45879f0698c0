"""`python -m tunelab.server`: run the server (see tunelab.server.main)."""

from tunelab.server.main import main

main()
