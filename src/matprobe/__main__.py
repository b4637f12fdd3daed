from matprobe.cli import main

raise SystemExit(main())
