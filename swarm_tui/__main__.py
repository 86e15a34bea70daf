from swarm_tui.cli import main

raise SystemExit(main())
