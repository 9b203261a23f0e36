"""prefcall over streamable HTTP with a bearer token: a minimal host.

Start the server (the token belongs to user "alice"):

    PREFCALL_TOKENS="my-long-secret-token-123:alice" prefcall serve --transport http --port 8765

Then:

    python clients/http_client.py --token my-long-secret-token-123 "Find me a flight to Chicago"

The token decides the user: tools default to alice's profile, and naming another user_id is refused.
"""

from __future__ import annotations

import argparse
import json
import os

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def ask(url: str, token: str, request: str, catalogue: str, instruction: str | None) -> None:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with Client(streamable_http_client(url, http_client=http), read_timeout_seconds=600) as client:
        if instruction:
            added = await client.call_tool("add_instruction", {"text": instruction})
            print("add_instruction:", json.dumps(added.structured_content or added.content[0].text))
        profile = await client.call_tool("list_instructions", {})
        print("profile:", json.dumps(profile.structured_content, indent=1))
        result = await client.call_tool("parse_request", {"dialogue": request, "catalogue": catalogue})
        if result.is_error:
            print("error:", result.content[0].text)
            return
        answer = result.structured_content
        print(f"decision: {answer['decision']}")
        for call in answer["calls"]:
            print(f"  {call['name']}({', '.join(f'{k}={v!r}' for k, v in call['arguments'].items())})")
        if answer["question"]:
            print(f"  question: {answer['question']}")


def main() -> None:
    parser = argparse.ArgumentParser(description="Call prefcall over streamable HTTP with a bearer token.")
    parser.add_argument("request", help="the user's request")
    parser.add_argument("--url", default="http://127.0.0.1:8765/mcp")
    parser.add_argument("--token", default=os.environ.get("PREFCALL_TOKEN"), help="bearer token (or PREFCALL_TOKEN)")
    parser.add_argument("--catalogue", default="nlsi")
    parser.add_argument("--instruction", help="a standing instruction to add first")
    args = parser.parse_args()
    if not args.token:
        parser.error("pass --token (the server prints a generated one at start if none is configured)")
    anyio.run(ask, args.url, args.token, args.request, args.catalogue, args.instruction)


if __name__ == "__main__":
    main()
