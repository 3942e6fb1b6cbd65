"""`python -m orchestrator._cli`: the same CLI as the `orchestrator` script (handy with `python -X importtime`)."""

from . import main

main()
