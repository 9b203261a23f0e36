"""Example MCP host: `prefcall demo` as a script. The client lives in the package (prefcall.demo) so that
`prefcall demo` works from an installed package; this file shows a host calling it.

    python clients/demo_stdio.py [--model PATH] [--threads N]
"""

from prefcall.demo import main

if __name__ == "__main__":
    raise SystemExit(main())
