"""The MCP tools, resources and prompt prefcall serves, registered on a server by `register_tools`: each handler
checks its input, calls one `Services` method and returns a typed wire model (`server/models.py`). The server
itself is built in `server/app.py`.

No `from __future__ import annotations` here: the SDK reads the handlers' annotations at registration.
"""

import json
import re
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, ElicitationResult, MCPServer, Resolve
from mcp.server.mcpserver.resolve import Elicit
from mcp_types import ToolAnnotations
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field, create_model

from prefcall.config import Settings
from prefcall.errors import LimitError, ValidationError
from prefcall.schemas.model import Call, Catalogue, Function, MissingArgument, Turn
from prefcall.schemas.state import DialogueState
from prefcall.server import models as m
from prefcall.server.auth import current_user, resolve_user
from prefcall.server.reporting import progress_for, resource_errors, tell, tool_errors
from prefcall.server.services import LOCAL_CALLER, Caller, Services, catalogue_summary
from prefcall.server.validation import (
    check_text,
    check_tool_list,
    check_unicode,
    check_unique_names,
    dialogue_turns,
    json_size,
    state_in,
    tool_parameters,
)

Config = Literal["default", "ext-tag", "joint-tag", "taps", "fnctod-full", "full"]

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
ADDITIVE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
UPDATE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)

# Descriptions shared by several tools.
UserId = Annotated[
    str | None,
    Field(description="profile id ([A-Za-z0-9_.@-]); over HTTP defaults to the bearer token's user"),
]
CatalogueName = Annotated[str, Field(description="catalogue name, see list_catalogues (built-ins: nlsi, sgd)")]
Dialogue = Annotated[
    str | list[m.TurnIn],
    Field(description="the user's request as a string, or the conversation as turns (user/assistant; "
                      "assistant turns may carry the calls they made)"),
]


# ------------------------------------------------------------------------------- clarify + elicitation
class ClarifyFirstPass(BaseModel):
    """Clarify's first answer, computed by a resolver so MCP elicitation can ask the user before the tool body."""

    model_config = {"arbitrary_types_allowed": True}

    outcome: m.ClarifyOutcome
    user_id: str | None = None
    turns: list[Turn]
    catalogue: Catalogue
    instructions: list[str] = Field(default_factory=list)


def answer_schema(missing: list[MissingArgument]) -> type[BaseModel]:
    """A flat string-only form (what elicitation allows) with one field per missing argument."""
    fields: dict[str, Any] = {}
    for item in missing:
        key = re.sub(r"\W", "_", item.argument).strip("_") or "answer"
        if key[0].isdigit():
            key = f"arg_{key}"
        label = item.description or item.argument.replace("_", " ")
        fields.setdefault(key, (str, Field(description=label[:200])))
    if not fields:
        fields["answer"] = (str, Field(description="your answer"))
    return create_model("ClarifyAnswer", **fields)


def request_caller() -> Caller:
    """Who this request acts for: over HTTP the token's user, alone with their data (`private`); on stdio and
    in-process the one local user, as before users existed."""
    user = current_user()
    return Caller(owner=user, private=True) if user is not None else LOCAL_CALLER


def client_can_elicit(ctx: Context) -> bool:
    """Whether asking the user can work on this request: the client declared elicitation, and either the
    protocol carries the question in the result (2026-07-28: the SDK's portable input-required form, a retry
    with the answer) or the connection has a back channel for `elicitation/create` (2025 revisions over stdio
    or SSE; not stateless or JSON-response HTTP). Otherwise clarify answers with the question as data."""
    capabilities = ctx.client_capabilities
    if capabilities is None or capabilities.elicitation is None:
        return False
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return True
    try:
        return bool(ctx.session.can_send_request)
    except Exception:  # noqa: BLE001 - no session to ask through: answer with the question as data
        return False


# ------------------------------------------------------------------------------- the tools
def register_tools(server: MCPServer, services: Services, settings: Settings) -> None:
    """Every tool, resource and prompt of prefcall, on `server`, served by `services`."""

    def limit() -> int:
        return settings.max_dialogue_chars

    def turns_of(dialogue: str | list[m.TurnIn]) -> list[Turn]:
        return dialogue_turns(dialogue, settings.max_dialogue_chars, settings.max_dialogue_turns)

    # -- parse_request ---------------------------------------------------------------------------
    @server.tool(title="Parse a request into personalised calls", annotations=READ_ONLY)
    async def parse_request(
        dialogue: Dialogue,
        catalogue: CatalogueName,
        ctx: Context,
        user_id: UserId = None,
        config: Annotated[Config, Field(description="pipeline configuration; 'full' is the best")] = "full",
        allow_refuse: Annotated[bool, Field(description="may answer 'refuse' when no function fits")] = True,
        applicable: Annotated[
            list[str] | None, Field(description="standing instructions known to apply (skips selection)")
        ] = None,
        state: Annotated[
            DialogueState | None,
            Field(description="the `state` the previous turn's result carried: stands for the earlier calls, so "
                              "the dialogue may be just the new turn (the conversation's state comes back updated)")
        ] = None,
        conversation_id: Annotated[
            str | None,
            Field(min_length=1, max_length=200,
                  description="or name the conversation and prefcall keeps its state between turns (per user, in "
                              "memory, for PREFCALL_CONVERSATION_TTL_S after its last turn): send only the new turn")
        ] = None,
    ) -> m.ParseRequestResult:
        """The calls to make for the user's request, filled from the request AND the user's standing
        instructions; or a clarifying question (decision 'ask'); or 'refuse' when no function fits. The result's
        `state` is the conversation's state after this turn (per function, every value so far and its source)."""
        with tool_errors():
            user = resolve_user(user_id)
            turns = turns_of(dialogue)
            state = state_in(state, settings.max_dialogue_chars)
            if applicable is not None:
                check_unicode(applicable, "applicable")
                check_applicable(applicable)
            await tell(ctx, "info", f"parse_request for {user} on {catalogue} ({config})")
            result = await services.parse(user, turns, catalogue, config, {"allow_refuse": allow_refuse},
                                          applicable, progress_for(ctx), caller=request_caller(), state=state,
                                          conversation=conversation_id)
            await tell(ctx, "info", f"decision {result.decision}: {len(result.calls)} call(s), "
                                    f"{result.trace.evaluated} tokens evaluated, {result.trace.reused} reused")
            return result

    # -- select_tools_nlt ------------------------------------------------------------------------
    @server.tool(title="Select tools in natural language (NLT)", annotations=READ_ONLY)
    async def select_tools_nlt(
        message: Annotated[str, Field(description="the user's request")],
        ctx: Context,
        tools: Annotated[
            list[m.ToolIn] | None, Field(description="tools as in MCP tools/list or OpenAI format")
        ] = None,
        catalogue: Annotated[str | None, Field(description="or a stored catalogue name instead of tools")] = None,
        mode: Annotated[
            Literal["score", "generate", "structured"],
            Field(description="score (default): the model's YES/NO log-odds per tool, calibrated against "
                              "content-free requests, plus a lexical prior, decided by the model's fitted rule; "
                              "generate: reasoning then YES/NO lines per tool (the NLT paper); structured: JSON baseline"),
        ] = "score",
        context: Annotated[str | None, Field(description="earlier conversation, if any")] = None,
        threshold: Annotated[float | None, Field(ge=0.0, le=1.0, description="score mode: decision probability "
                                                 "a tool needs; default: the threshold fitted for the model")] = None,
        calibrate: Annotated[bool, Field(description="score mode: subtract the log-odds the model gives each tool "
                                                     "for content-free requests (cached per catalogue)")] = True,
    ) -> m.NltSelection:
        """Decide YES/NO for every tool for this message; the selected set (possibly empty: no tool needed),
        decision probabilities (score mode) and the selector's reasoning (generate mode)."""
        with tool_errors():
            text = check_text(message, "message", limit())
            if context is not None:
                context = check_text(context, "context", limit()) if context.strip() else None
            if (tools is None) == (catalogue is None):
                raise ValidationError("pass either tools (a tool list) or catalogue (a stored catalogue name)")
            chosen: Catalogue | list[Function]
            if tools is not None:
                if not tools:
                    raise ValidationError("tools is empty: pass at least one tool")
                check_tool_list(tools, settings.max_tools, settings.max_catalogue_bytes)
                check_unicode([t.model_dump() for t in tools], "tools")
                check_unique_names([t.name for t in tools])
                chosen = [Function(name=t.name, description=t.description, parameters=tool_parameters(t))
                          for t in tools]
            else:
                chosen = await services.catalogue(str(catalogue), request_caller())
            return await services.select_tools(text, chosen, mode=mode, context=context,
                                               threshold=threshold,  # None: the rule fitted for the model
                                               calibrate=calibrate, progress=progress_for(ctx),
                                               caller=request_caller())

    # -- clarify (with MCP elicitation when the client supports it) ------------------------------
    async def clarify_first_pass(
        dialogue: Dialogue, catalogue: str, user_id: str | None, ctx: Context
    ) -> ClarifyFirstPass:
        with tool_errors():
            turns = turns_of(dialogue)
            user = resolve_user(user_id) if user_id or ctx_has_token() else None
            instructions = [i.text for i in await services.instructions(user)] if user else []
            found = await services.catalogue(catalogue, request_caller())
            outcome = await services.clarify(turns, found, instructions, progress_for(ctx), caller=request_caller())
            return ClarifyFirstPass(outcome=outcome, user_id=user, turns=turns, catalogue=found,
                                    instructions=instructions)

    async def ask_the_user(
        first: Annotated[ClarifyFirstPass, Resolve(clarify_first_pass)], elicit: bool, ctx: Context
    ) -> Any:
        # Only a real question, and only to clients that declared elicitation; others get it as data.
        if not elicit or first.outcome.decision != "question" or not client_can_elicit(ctx):
            return None
        return Elicit(first.outcome.question or "Could you give more details?",
                      answer_schema(first.outcome.missing_arguments))

    @server.tool(title="Ask, continue or admit a limitation (QwN)", annotations=READ_ONLY)
    async def clarify(
        dialogue: Dialogue,
        catalogue: CatalogueName,
        ctx: Context,
        first: Annotated[ClarifyFirstPass, Resolve(clarify_first_pass)],
        answer: Annotated[ElicitationResult[Any], Resolve(ask_the_user)],
        user_id: UserId = None,
        elicit: Annotated[bool, Field(description="ask the user through MCP elicitation when possible")] = True,
    ) -> m.ClarifyOutcome:
        """Before calling: 'question' (with the question and the missing arguments), 'continue', or
        'limitation' (no tool fits). With elicit and a client that supports elicitation, the user is asked
        directly and the answer folded back in (the result then reflects the completed dialogue)."""
        with tool_errors():
            outcome = first.outcome
            data = getattr(answer, "data", None)
            if answer.action != "accept":
                return outcome.model_copy(update={"elicited": True, "elicitation_action": answer.action})
            if data is None:
                return outcome
            reply = {k: v for k, v in data.model_dump().items() if str(v).strip()}
            check_unicode(reply, "elicited answer")
            text = "; ".join(f"{k.replace('_', ' ')}: {v}" for k, v in reply.items())
            turns = [*first.turns, Turn(role="assistant", content=outcome.question or ""),
                     Turn(role="user", content=text)]
            await tell(ctx, "info", "the user answered the clarifying question; re-running clarify")
            again = await services.clarify(turns, first.catalogue, first.instructions, progress_for(ctx),
                                           caller=request_caller())
            calls: list[m.CallOut] = []
            if again.decision == "continue" and first.user_id:
                parsed = await services.parse(first.user_id, turns, first.catalogue.name, "full",
                                              {"allow_refuse": True}, None, progress_for(ctx), caller=request_caller())
                calls = parsed.calls
            return again.model_copy(update={"elicited": True, "elicitation_action": "accept", "answer": reply,
                                            "calls": calls})

    def ctx_has_token() -> bool:
        return current_user() is not None

    def check_applicable(texts: list[str], field: str = "applicable") -> None:
        """Instructions a host passes inline obey the same limits as stored ones."""
        if len(texts) > settings.max_instructions:
            raise LimitError(f"{field} has {len(texts)} instructions", settings.max_instructions, "max_instructions")
        for text in texts:
            if len(text) > settings.max_instruction_chars:
                raise LimitError(f"{field} has an instruction of {len(text)} characters",
                                 settings.max_instruction_chars, "max_instruction_chars")

    # -- tag_profile -----------------------------------------------------------------------------
    @server.tool(title="Tag standing instructions (TAPS)", annotations=UPDATE)
    async def tag_profile(
        catalogue: CatalogueName,
        ctx: Context,
        user_id: UserId = None,
        force: Annotated[bool, Field(description="re-tag instructions that already have fresh tags")] = False,
    ) -> m.TagProfileResult:
        """Tag every untagged or stale standing instruction with TAPS structured tags and store them."""
        with tool_errors():
            user = resolve_user(user_id)
            result = await services.tag_profile(user, catalogue, force=force, progress=progress_for(ctx),
                                                caller=request_caller())
            await tell(ctx, "info", f"tagged {result.tagged}, skipped {result.skipped}, invalid {result.invalid}")
            return result

    # -- profile management ----------------------------------------------------------------------
    @server.tool(title="Create a profile", annotations=UPDATE)
    async def create_profile(user_id: UserId = None) -> m.InstructionChange:
        """Create an empty profile (no-op when it exists)."""
        with tool_errors():
            user = resolve_user(user_id)
            check_unicode(user, "user_id")
            created = await services.create_profile(user)
            count = len(await services.instructions(user))
            return m.InstructionChange(user_id=user, action="created" if created else "exists", instructions=count)

    @server.tool(title="Add a standing instruction", annotations=ADDITIVE)
    async def add_instruction(
        text: Annotated[str, Field(description="e.g. 'When I book flights, I fly Delta.'")],
        user_id: UserId = None,
        create: Annotated[bool, Field(description="create the profile when it does not exist")] = True,
        idempotency_key: Annotated[
            str | None, Field(description="a key unique to this write (e.g. a UUID): a retry with the same key "
                                          "stores nothing new and returns the first write's instruction")
        ] = None,
    ) -> m.InstructionChange:
        """Add a standing instruction to the user's profile."""
        with tool_errors():
            user = resolve_user(user_id)
            clean = check_text(text, "text", settings.max_instruction_chars, "max_instruction_chars")
            added, count = await services.add_instruction(user, clean, create=create, request_key=idempotency_key)
            return m.InstructionChange(user_id=user, action="added", instruction=added, instructions=count)

    @server.tool(title="Remove a standing instruction", annotations=DESTRUCTIVE)
    async def remove_instruction(
        instruction_id: Annotated[int, Field(description="the id shown by list_instructions")],
        user_id: UserId = None,
    ) -> m.InstructionChange:
        """Remove one standing instruction from the user's profile."""
        with tool_errors():
            user = resolve_user(user_id)
            removed, count = await services.remove_instruction(user, instruction_id)
            return m.InstructionChange(user_id=user, action="removed", instruction=removed, instructions=count)

    @server.tool(title="List standing instructions", annotations=READ_ONLY)
    async def list_instructions(user_id: UserId = None) -> m.ProfileOut:
        """The user's standing instructions with their TAPS tags."""
        with tool_errors():
            user = resolve_user(user_id)
            return m.ProfileOut(user_id=user, instructions=await services.instructions(user))

    # -- catalogues ------------------------------------------------------------------------------
    @server.tool(title="List catalogues", annotations=READ_ONLY)
    async def list_catalogues() -> m.CatalogueList:
        """The built-in catalogues (API schema sets) and your own, with their function names."""
        with tool_errors():
            listed = await services.catalogues(request_caller())
            return m.CatalogueList(catalogues=[catalogue_summary(c) for c in listed])

    @server.tool(title="Import a catalogue", annotations=DESTRUCTIVE)
    async def import_catalogue(
        name: Annotated[str, Field(min_length=1, max_length=100, description="name to store it under")],
        tools: Annotated[
            list[dict[str, Any]],
            Field(description="a tool list: MCP tools/list entries (inputSchema) or OpenAI tools/functions"),
        ],
        description: Annotated[str | None, Field(description="what the catalogue is for")] = None,
        replace: Annotated[bool, Field(description="overwrite a catalogue with this name")] = False,
    ) -> m.ImportResult:
        """Store a host's tool list as your catalogue, usable by parse_request, clarify and select_tools_nlt.
        Within the limits (README), with every schema compiled to its grammar now: a bad one is refused here."""
        with tool_errors():
            if not tools:
                raise ValidationError("tools is empty: pass at least one tool")
            check_tool_list(tools, settings.max_tools, settings.max_catalogue_bytes)
            check_unicode([name, description, tools], "tools")
            check_unique_names([_tool_name(t) for t in tools])
            catalogue, replaced = await services.import_catalogue(tools, name, description, replace,
                                                                  request_caller())
            return m.ImportResult(name=catalogue.name, functions=catalogue.names, replaced=replaced)

    @server.tool(title="Delete a catalogue", annotations=DESTRUCTIVE)
    async def delete_catalogue(
        name: Annotated[str, Field(min_length=1, max_length=100, description="one of your catalogues")],
    ) -> m.CatalogueDeleted:
        """Delete one of your own catalogues (built-ins cannot be deleted)."""
        with tool_errors():
            await services.delete_catalogue(name, request_caller())
            return m.CatalogueDeleted(name=name, deleted=True)

    # -- feedback --------------------------------------------------------------------------------
    @server.tool(title="Report whether a call was accepted", annotations=ADDITIVE)
    async def report_feedback(
        dialogue: Dialogue,
        catalogue: CatalogueName,
        calls: Annotated[
            list[m.CallIn], Field(description="the accepted calls, or the user's corrected calls")
        ],
        ctx: Context,
        user_id: UserId = None,
        outcome: Annotated[
            Literal["accepted", "corrected", "rejected"],
            Field(description="accepted / corrected (calls are the corrected ones) are stored as a "
                              "demonstration; rejected stores nothing"),
        ] = "accepted",
        instructions_used: Annotated[
            list[str] | None, Field(description="the standing instructions that applied (from parse_request)")
        ] = None,
    ) -> m.FeedbackResult:
        """Tell prefcall the host accepted (or corrected) calls; they become a few-shot demonstration for
        similar future requests."""
        with tool_errors():
            user = resolve_user(user_id)
            turns = turns_of(dialogue)
            size = json_size([[t.model_dump() for t in turns], [c.model_dump() for c in calls], instructions_used])
            if size > settings.max_feedback_bytes:
                raise LimitError(f"the feedback is {size} bytes of JSON", settings.max_feedback_bytes,
                                 "max_feedback_bytes")
            check_unicode([c.model_dump() for c in calls], "calls")
            check_unicode(instructions_used or [], "instructions_used")
            if instructions_used is not None:
                check_applicable(instructions_used, "instructions_used")
            caller = request_caller()
            found = await services.catalogue(catalogue, caller)
            chosen = [Call(name=c.name, arguments=c.arguments) for c in calls]
            unknown = [c.name for c in chosen if found.function(c.name) is None]
            if unknown:
                raise ValidationError(f"calls name functions not in catalogue {found.name!r}: "
                                      f"{', '.join(unknown)}: use names from list_catalogues")
            if outcome == "rejected":
                return m.FeedbackResult(stored=False, calls=[])
            if not chosen:
                raise ValidationError("calls is empty: pass the accepted or corrected calls")
            instructions = instructions_used
            if instructions is None:
                instructions = [i.text for i in await services.instructions(user)]
            await services.ready(progress_for(ctx))
            demo = await services.store_demonstration(turns, instructions, found.name, chosen, caller)
            await tell(ctx, "info", f"stored demonstration {demo.id} for {found.name}")
            return m.FeedbackResult(stored=True, demonstration_id=demo.id,
                                    calls=[m.CallOut(name=c.name, arguments=c.arguments) for c in chosen],
                                    corrected=outcome == "corrected")

    # -- resources -------------------------------------------------------------------------------
    @server.resource("profiles://{user_id}", name="profile", title="A user's standing instructions",
                     mime_type="application/json")
    async def profile_resource(user_id: str) -> str:
        """The profile: standing instructions with their TAPS tags."""
        with resource_errors():
            user = resolve_user(user_id)
            profile = m.ProfileOut(user_id=user, instructions=await services.instructions(user))
            return profile.model_dump_json(indent=1)

    @server.resource("schemas://catalogues", name="catalogues", title="Catalogues", mime_type="application/json")
    async def catalogues_resource() -> str:
        """The built-in catalogues and yours, with their function names."""
        with resource_errors():
            listed = await services.catalogues(request_caller())
            listing = m.CatalogueList(catalogues=[catalogue_summary(c) for c in listed])
            return listing.model_dump_json(indent=1)

    @server.resource("schemas://{catalogue}", name="catalogue", title="A catalogue's JSON",
                     mime_type="application/json")
    async def catalogue_resource(catalogue: str) -> str:
        """The catalogue's functions as JSON Schema (prefcall's export form)."""
        with resource_errors():
            found = await services.catalogue(catalogue, request_caller())
            return json.dumps({"name": found.name, "description": found.description,
                               "functions": [f.model_dump() for f in found.functions]}, indent=1, ensure_ascii=False)

    # -- prompt ----------------------------------------------------------------------------------
    @server.prompt(name="use_prefcall", title="Use prefcall in this conversation")
    def use_prefcall(user_id: str = "", catalogue: str = "") -> str:
        """How to use prefcall's tools for personalised calls in this conversation."""
        who = f"the user id '{user_id}'" if user_id else "the user's id"
        which = f"the catalogue '{catalogue}'" if catalogue else "a catalogue from list_catalogues"
        return (
            "You can turn my requests into concrete API calls personalised with my standing instructions.\n"
            f"For each request: call parse_request with {who}, {which} and the dialogue so far "
            "(a list of user/assistant turns; include earlier calls on assistant turns).\n"
            "- decision 'call': show me the calls (name and arguments) and, when I confirm, make them; then call "
            "report_feedback with outcome 'accepted' (or 'corrected' with my corrected calls).\n"
            "- decision 'ask': ask me the question exactly, then call parse_request again with my answer added.\n"
            "- decision 'refuse': tell me no available tool fits.\n"
            "When I state a lasting preference ('I always ...', 'when I ... I prefer ...'), offer to save it "
            "with add_instruction, and run tag_profile afterwards. Never invent argument values I did not give."
        )


def _tool_name(tool: dict[str, Any]) -> str:
    inner = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    name = inner.get("name") if isinstance(inner, dict) else None
    if not isinstance(name, str) or not name.strip():
        raise ValidationError("every tool needs a non-empty 'name'")
    return name
