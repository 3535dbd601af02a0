"""`python -m durability.command`: the `durability` command."""

from durability.command import main

raise SystemExit(main())
