from popula.cli import main

raise SystemExit(main())
