"""Build tests/data/nlt2/items.jsonl ("NLT that travels"): a second NLT set from other sources and another author
style than tests/data/nlt. Deterministic (fixed seed, sorted inputs), no model, no network.

Run from a source checkout with ../shared/data beside it (or PREFCALL_SHARED_DATA, or --data-dir):

    PYTHONPATH=src python tests/data/nlt2/build.py            # writes items.jsonl
    PYTHONPATH=src python tests/data/nlt2/build.py --check    # exit 1 when items.jsonl is not what it writes

Sources (README.md in this folder says more):
- converted from ../shared/data: BFCL v4 `multiple` (question + its function list, gold from possible_answer),
  SGD dev dialogues (first user turns, joined across services; closing turns; requests for a service not in the
  tool list) and NLSI dev (user utterances with the API their gold calls names, tools from NLSI's catalogue);
- written by hand here: an IDE assistant, a smart home and a telecom customer-service desk.

Converted items carry `source`: the keys of the shared items they were made from ("bfcl/BFCL_v4_multiple.json:
multiple_57"). The frozen split (prefcall.evaluation.splits) puts such an item on the side its source items are
on, so a fit on nlt2's tune part never reads a message that another source reports on; the build therefore only
joins source items from the same side of that split. Hand-written items have `source: []`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
OUT = HERE / "items.jsonl"
SEED = 20260412

try:
    from prefcall.evaluation import splits as _splits
except ImportError:  # run as a plain script from a checkout
    sys.path.insert(0, str(REPO / "src"))
    from prefcall.evaluation import splits as _splits

BFCL = "bfcl/BFCL_v4_multiple.json"
BFCL_ANSWERS = "bfcl/possible_answer/BFCL_v4_multiple.json"
SGD_DIALOGUES = "sgd/dev_dialogues_001.json"
SGD_SCHEMA = "sgd/dev_schema.json"
NLSI = "nlsi/dev.json"
NLSI_CATALOGUE = REPO / "src" / "prefcall" / "data" / "catalogues" / "nlsi.json"
SIDES = ("tune", "report")

# -- hand-written catalogues -------------------------------------------------------------------------------------
# Another style than tests/data/nlt: larger catalogues (10 tools), terse reference-manual descriptions with their
# parameters, chat-style messages (lower case, fragments), more requests that need two to four tools.
# An item: (messages, expected); messages is one user string or (role, text) pairs ending with the user's turn.

HAND: dict[str, dict] = {}

HAND["ide"] = {
    "context": "You are the assistant built into a code editor. The open workspace is a Python web service "
               "(src/, tests/, config/) under git.",
    "tools": [
        ("open_file", "open_file(path, line?) - open a workspace file in the editor, optionally scrolled to a line."),
        ("search_code", "search_code(query, glob?) - full-text / regex search over the workspace; "
                        "returns file:line hits."),
        ("go_to_definition", "go_to_definition(symbol) - jump to where a function, class or variable is defined."),
        ("rename_symbol", "rename_symbol(old, new) - rename a symbol and every reference to it (refactoring)."),
        ("run_tests", "run_tests(target?) - run the test suite, one file or one test id; "
                      "returns pass/fail and failure output."),
        ("format_code", "format_code(path?) - reformat a file or the whole workspace with the configured formatter."),
        ("explain_error", "explain_error(text) - explain an error message or stack trace and suggest a fix."),
        ("git_diff", "git_diff(path?) - show the uncommitted changes, per file."),
        ("git_commit", "git_commit(message, files?) - stage the given files (default: all changes) and commit them."),
        ("install_package", "install_package(name, version?) - add a dependency to the project and install it."),
    ],
    "items": [
        ("morning! coffee's kicking in, let's get going", []),
        ("what's the difference between a list and a tuple in python?", []),
        ("tests used to take ten minutes in this repo, now they're under one. nice work whoever did that", []),
        ("do people usually write commit messages in past tense or imperative?", []),
        ("ok that fixed it, thanks a lot", []),
        ("is black more opinionated than ruff's formatter, in your experience?", []),
        ("I'll do the rename myself later, no need to touch it.", []),
        ("explain what a python decorator is, in two sentences", []),
        ("git is so confusing sometimes lol", []),
        ([("user", "can you commit my changes?"),
          ("assistant", "Sure. What commit message should I use?"),
          ("user", "actually hold off, I'm not done yet.")], []),
        ("where is `parse_invoice` defined?", ["go_to_definition"]),
        ("pull up src/billing/models.py around line 140", ["open_file"]),
        ("does anything still call the old `legacy_auth` helper? find every usage", ["search_code"]),
        ("run the tests in tests/test_billing.py", ["run_tests"]),
        ("this file's indentation is all over the place, clean it up", ["format_code"]),
        ("TypeError: 'NoneType' object is not subscriptable -- what does that mean?", ["explain_error"]),
        ("what have I changed since the last commit?", ["git_diff"]),
        ("commit everything with the message 'fix rounding in invoice totals'", ["git_commit"]),
        ("we need requests 2.32 in this project", ["install_package"]),
        ("rename `calc_tot` to `calculate_total` across the codebase", ["rename_symbol"]),
        ([("user", "CI is red on test_refunds"),
          ("assistant", "Do you want me to run that test here?"),
          ("user", "yep")], ["run_tests"]),
        ("show me the settings file, config/settings.toml", ["open_file"]),
        ("run the tests and if they pass commit with 'bump version'", ["run_tests", "git_commit"]),
        ("format the whole project, then show me what the formatter changed", ["format_code", "git_diff"]),
        ("find where we read the STRIPE_KEY env var and open that file", ["search_code", "open_file"]),
        ("rename `UserDTO` to `UserRecord` everywhere and rerun the suite to make sure nothing broke",
         ["rename_symbol", "run_tests"]),
        ("install httpx, then run the tests for the client module", ["install_package", "run_tests"]),
        ("got this: KeyError: 'currency' in totals.py line 88. explain it and open the file at that line",
         ["explain_error", "open_file"]),
        ("jump to the definition of `apply_discount` and find all the places that call it",
         ["go_to_definition", "search_code"]),
        ("format src/api, run the tests, and commit it all as 'tidy api module'",
         ["format_code", "run_tests", "git_commit"]),
        ("look at my diff, and commit it as 'docs: typo' if it only touches the README", ["git_diff", "git_commit"]),
        ("add pytest-cov, run the tests, and show me the diff before I commit it myself",
         ["install_package", "run_tests", "git_diff"]),
        ("rename `get_usr` to `get_user`, format the files it touched, run the tests, and commit as 'rename get_usr'",
         ["rename_symbol", "format_code", "run_tests", "git_commit"]),
        ("find every file that imports old_logging, rename its `log_event` function to `emit_event` and run the tests",
         ["search_code", "rename_symbol", "run_tests"]),
        ([("user", "the tests fail with AttributeError: 'Order' object has no attribute 'total'"),
          ("assistant", "Want me to explain the error?"),
          ("user", "yes, and take me to where Order is defined too")], ["explain_error", "go_to_definition"]),
    ],
}

HAND["home"] = {
    "context": "You are the voice assistant of a smart home: living room, kitchen, office, two bedrooms, hall, "
               "garage, garden; front, back and garage doors.",
    "tools": [
        ("set_lights", "Lights. on | off | brightness 0-100 | colour. Target: a room, 'garden', 'porch' or 'all'."),
        ("set_thermostat", "Climate. Target temperature (C) or mode (heat, cool, eco, off) per zone."),
        ("locks", "Door locks (front, back, garage): lock, unlock, or report state."),
        ("arm_alarm", "Alarm system: arm (away | night) or disarm."),
        ("view_camera", "Cameras (front door, garden, garage): show the live feed or the last clip."),
        ("play_media", "Speakers and TV: play music, radio, podcasts; pause, stop, volume. Per room."),
        ("set_blinds", "Blinds and curtains: open, close or set a position 0-100 per room."),
        ("start_vacuum", "Robot vacuum: clean a room or the whole floor, or send it back to the dock."),
        ("get_energy_usage", "Energy meter: electricity/gas use and cost for a day, week or month, per device."),
        ("create_routine", "Routines: save an automation (trigger: time, sunset, arrival...; actions) to run later."),
    ],
    "items": [
        ("thanks, that's perfect", []),
        ("what's a comfortable temperature for sleeping?", []),
        ("the new bulbs in the kitchen are so much nicer than the old ones", []),
        ("my neighbour just got the same doorbell camera as us, funny", []),
        ("how much does a heat pump usually cost to run per month?", []),
        ("no, leave the lights as they are.", []),
        ("who made you?", []),
        ([("user", "turn on the garden lights"),
          ("assistant", "Done, the garden lights are on."),
          ("user", "great, thank you")], []),
        ("the robot vacuum got stuck under the sofa again yesterday, the cat loved it", []),
        ("is it bad for the TV to sit on standby all the time?", []),
        ("kitchen lights to 40% please", ["set_lights"]),
        ("it's boiling in here, cool the living room to 21", ["set_thermostat"]),
        ("lock the back door", ["locks"]),
        ("who's at the front door? show me", ["view_camera"]),
        ("put on some jazz in the kitchen", ["play_media"]),
        ("close the bedroom blinds halfway", ["set_blinds"]),
        ("vacuum the living room while we're out", ["start_vacuum"]),
        ("how much electricity did we use last week?", ["get_energy_usage"]),
        ("arm the alarm in night mode", ["arm_alarm"]),
        ("every weekday at 6:30, fade the bedroom lights on slowly", ["create_routine"]),
        ("is the garage door locked?", ["locks"]),
        ([("user", "the baby's asleep in the second bedroom"),
          ("assistant", "Okay. Anything you'd like me to do?"),
          ("user", "yes, turn the music off in there")], ["play_media"]),
        ("make a routine that closes the blinds and turns on the porch light at sunset every day", ["create_routine"]),
        ("movie night: dim the living room lights to 10% and close the blinds", ["set_lights", "set_blinds"]),
        ("we're away for the weekend, lock all the doors and arm the alarm", ["locks", "arm_alarm"]),
        ("someone's ringing. show me the front camera and unlock the door if it's the courier",
         ["view_camera", "locks"]),
        ("turn the heating down to 17 and switch off all the lights, I'm off to bed", ["set_thermostat", "set_lights"]),
        ("start the vacuum and play my podcast in the office", ["start_vacuum", "play_media"]),
        ("show me how much the heating used this month and set it one degree lower",
         ["get_energy_usage", "set_thermostat"]),
        ("leaving now: lock up, arm the alarm, lights off everywhere, and heat down to 16",
         ["locks", "arm_alarm", "set_lights", "set_thermostat"]),
        ("wake-up mode: open the bedroom blinds, lights on at 70%, and play the morning news",
         ["set_blinds", "set_lights", "play_media"]),
        ("check the garden camera, I heard something, and turn on the garden lights", ["view_camera", "set_lights"]),
        ("guests in ten minutes! vacuum the hall, warm the living room to 22 and put on some background music",
         ["start_vacuum", "set_thermostat", "play_media"]),
        ([("user", "I think I left the garage open"),
          ("assistant", "The garage door is unlocked. Shall I lock it?"),
          ("user", "yes, and show me the garage camera so I can check the car")], ["locks", "view_camera"]),
        ("disarm the alarm and unlock the front door, I'm home", ["arm_alarm", "locks"]),
        ("what did we spend on energy yesterday? and set up a routine that turns everything off at midnight",
         ["get_energy_usage", "create_routine"]),
    ],
}

HAND["telecom"] = {
    "context": "You are the support agent of Voltline, a mobile and broadband provider. The customer is logged in.",
    "tools": [
        ("get_invoice", "Billing / invoices: the customer's bills and itemised charges for a period."),
        ("issue_refund", "Billing / refunds: refund or credit an amount to the customer's account, with a reason."),
        ("change_plan", "Account / plan: move the customer to another tariff (upgrade or downgrade)."),
        ("cancel_contract", "Account / cancellation: end a mobile or broadband contract on a date."),
        ("update_contact_details", "Account / profile: change the email, phone number or postal address on file."),
        ("port_number", "Mobile / porting: request a PAC/STAC to move a number out, or start moving one in."),
        ("check_outage", "Network / status: known outages and maintenance for a postcode."),
        ("run_line_test", "Broadband / diagnostics: remote test of the customer's line and router."),
        ("book_engineer", "Broadband / visits: book a home visit by an engineer on a date and time slot."),
        ("open_ticket", "Cases: open a complaint or case for a team to follow up (escalation)."),
    ],
    "items": [
        ("hey", []),
        ("what does 'fair usage policy' mean, in general?", []),
        ("my old provider was terrible with refunds, you lot are much better", []),
        ("that's sorted then, cheers", []),
        ("how much faster is 5G than 4G, roughly?", []),
        ("I'm not cancelling, just venting. the price rise annoyed me.", []),
        ("is fibre better than copper for gaming?", []),
        ([("user", "can you send an engineer?"),
          ("assistant", "I can book one. Which day suits you?"),
          ("user", "actually it just started working again, never mind")], []),
        ("do you have a shop in Bristol?", []),
        ("thanks for your patience earlier, the engineer was lovely", []),
        ("why is my bill 20 pounds higher this month?", ["get_invoice"]),
        ("is there an outage in M14? my broadband is dead", ["check_outage"]),
        ("can you test my line? it keeps dropping", ["run_line_test"]),
        ("I'd like to move to the unlimited data plan", ["change_plan"]),
        ("I've got a new email, it's sam.k@fastmail.com", ["update_contact_details"]),
        ("I want to bring my number over from my old network", ["port_number"]),
        ("please refund the roaming charge, I was never abroad", ["issue_refund"]),
        ("I want to end my broadband contract", ["cancel_contract"]),
        ("book an engineer for Friday morning", ["book_engineer"]),
        ("I want to make a formal complaint", ["open_ticket"]),
        ([("user", "I've been charged twice for March"),
          ("assistant", "I can see two payments of 32 pounds. Would you like a refund of the duplicate?"),
          ("user", "yes please")], ["issue_refund"]),
        ("send me a copy of last month's bill", ["get_invoice"]),
        ("my internet's been down since last night. is it an outage or my line?", ["check_outage", "run_line_test"]),
        ("I'm still being charged for the plan I downgraded from. check the bill and refund the difference",
         ["get_invoice", "issue_refund"]),
        ("line test please, and if it's faulty book an engineer for tomorrow", ["run_line_test", "book_engineer"]),
        ("upgrade me to 900Mb fibre and change my address to 4 Mill Road, Stockport",
         ["change_plan", "update_contact_details"]),
        ("I'm moving my number in from EE and want the SIM-only 30GB plan", ["port_number", "change_plan"]),
        ("cancel my broadband and refund the days I've paid for after the cancellation",
         ["cancel_contract", "issue_refund"]),
        ("third outage this month. check if there's one now, refund me for the downtime and log a complaint",
         ["check_outage", "issue_refund", "open_ticket"]),
        ("look at my last three bills, refund the overcharges, and put my new number 07700 900123 on the account",
         ["get_invoice", "issue_refund", "update_contact_details"]),
        ("test my line, book an engineer, refund this month's line rental and file a complaint. I've had enough",
         ["run_line_test", "book_engineer", "issue_refund", "open_ticket"]),
        ([("user", "the wifi keeps cutting out"),
          ("assistant", "Sorry about that. I can run a line test, shall I?"),
          ("user", "yes, and check whether there's an outage in my area too")], ["run_line_test", "check_outage"]),
        ("switch me to the cheaper plan and show me what my next bill will look like", ["change_plan", "get_invoice"]),
        ("I'm leaving: cancel the contract and give me my PAC so I can take my number",
         ["cancel_contract", "port_number"]),
        ("update my email to ana@proton.me and open a case about the router you never delivered",
         ["update_contact_details", "open_ticket"]),
    ],
}

# -- converted items: how many per side of the frozen split ------------------------------------------------------
BFCL_PER_SIDE = {"one": 25, "join": {2: 5, 3: 3, 4: 2}, "none": 9}
SGD_PER_SIDE = {"one": 8, "join": 12, "closing": 6, "absent": 4}
NLSI_PER_SIDE = {"one": 20, "join": {2: 7, 3: 3}, "none": 8}
CONNECTORS = ("Also, ", "And ", "Besides that, ", "One more thing: ")
CONTEXT = {
    "bfcl": "You are an assistant that can call the functions listed below.",
    "sgd": "You are a virtual assistant connected to the services listed below.",
    "nlsi": "You are a personal assistant with access to the APIs listed below.",
}
STOP = {"get", "calculate", "find", "search", "info", "details", "data", "by", "of", "the", "and", "to", "for",
        "a", "in", "on", "calc", "compute", "check", "list", "fetch", "lookup", "retrieve", "api", "tool"}
NLSI_SIBLINGS = [{"GetMovies", "GetMedia"}, {"GetHotels", "GetHouseStays"}, {"GetEvents", "GetTravel"},
                 {"GetDentists", "GetDoctors"}, {"GetFlights", "GetBuses"}]
NLSI_NAMES = {"GetDenists": "GetDentists"}  # the data's misspelling of the catalogue's function


def shared_dir(arg: str | None = None) -> Path:
    return Path(arg or os.environ.get("PREFCALL_SHARED_DATA") or REPO.parent / "shared" / "data")


def sides_of(rel: str, shared: Path) -> dict[str, str]:
    """key -> tune | report | retired in the frozen split's rule for that shared file (computed from the data
    with the rule in prefcall.evaluation.splits, so it does not depend on the shipped splits.json)."""
    rule = _splits.RULES[f"shared:{rel}"]
    entry = _splits.build_source(rel, rule, shared / rel)
    return {**{k: "tune" for k in entry.tune}, **{k: "report" for k in entry.report},
            **{k: "retired" for k in entry.retired}}


def sentence(text: str) -> str:
    text = " ".join(text.split())
    return text if text[-1:] in ".?!" else text + "."


def join(texts: list[str], rng: random.Random) -> str:
    out = sentence(texts[0])
    for text in texts[1:]:
        connector = rng.choice(CONNECTORS)
        text = sentence(text)
        if connector[0] != "O" and not re.match(r"I\b|I'", text):
            text = text[0].lower() + text[1:]
        out += " " + connector + text
    return out


def item(id_: str, domain: str, tools: list[dict], messages: list[tuple[str, str]] | str, expected: list[str],
         source: list[str]) -> dict:
    turns = [("user", messages)] if isinstance(messages, str) else messages
    names = [t["name"] for t in tools]
    assert len(set(names)) == len(names), id_
    assert set(expected) <= set(names) and turns and turns[-1][0] == "user", id_
    assert all(text.strip() for _, text in turns), id_
    return {"id": id_, "domain": domain, "context": CONTEXT.get(domain, HAND.get(domain, {}).get("context")),
            "tools": tools, "messages": [{"role": r, "content": t} for r, t in turns],
            "expected": list(expected), "source": sorted(source)}


def tokens(name: str) -> set[str]:
    return {t for t in re.split(r"[._\s]+|(?<=[a-z])(?=[A-Z])", name.lower()) if t and t not in STOP}


# -- BFCL multiple -----------------------------------------------------------------------------------------------


def bfcl_items(shared: Path) -> list[dict]:
    rng = random.Random(f"{SEED}:bfcl")
    rows = [json.loads(x) for x in (shared / BFCL).read_text(encoding="utf-8").splitlines() if x.strip()]
    gold = {}
    for x in (shared / BFCL_ANSWERS).read_text(encoding="utf-8").splitlines():
        if x.strip():
            answer = json.loads(x)
            gold[answer["id"]] = [next(iter(call)) for call in answer["ground_truth"]]
    side = sides_of(BFCL, shared)
    data = {}
    for r in rows:
        turns = r["question"][0]
        if len(r["question"]) != 1 or [t["role"] for t in turns] != ["user"] or len(gold.get(r["id"], [])) != 1:
            continue
        data[r["id"]] = {"text": turns[0]["content"], "gold": gold[r["id"]][0],
                         "tools": [{"name": f["name"], "description": f["description"]} for f in r["function"]]}
    out = []
    for part in SIDES:
        pool = sorted((k for k in data if side.get(k) == part), key=lambda k: int(k.split("_")[-1]))
        rng.shuffle(pool)
        for n in range(BFCL_PER_SIDE["one"]):
            k = pool.pop(0)
            out.append(item(f"bfcl-{part}-one-{n + 1:02d}", "bfcl", data[k]["tools"], data[k]["text"],
                            [data[k]["gold"]], [f"{BFCL}:{k}"]))
        n = 0
        for size, count in sorted(BFCL_PER_SIDE["join"].items()):
            for _ in range(count):
                # Joined items share no word between one's function names and another's names or question, so
                # each request has one function for it.
                keys: list[str] = []
                for k in list(pool):
                    if len(keys) == size:
                        break
                    if all(apart(data[k], data[j]) for j in keys):
                        keys.append(k)
                        pool.remove(k)
                assert len(keys) == size, (part, size)
                tools = [t for k in keys for t in data[k]["tools"]]
                rng.shuffle(tools)
                n += 1
                out.append(item(f"bfcl-{part}-join-{n:02d}", "bfcl", tools, join([data[k]["text"] for k in keys], rng),
                                [data[k]["gold"] for k in keys], [f"{BFCL}:{k}" for k in keys]))
        # No tool: item A's question with item B's functions, B's function names sharing no word with A's question
        # or function names.
        for n in range(BFCL_PER_SIDE["none"]):
            a = pool.pop(0)
            b = next(k for k in pool if apart(data[a], data[k]))
            pool.remove(b)
            out.append(item(f"bfcl-{part}-none-{n + 1:02d}", "bfcl", data[b]["tools"], data[a]["text"], [],
                            [f"{BFCL}:{a}", f"{BFCL}:{b}"]))
    return out


def words(text: str) -> set[str]:
    return {w.rstrip("s") for w in re.findall(r"[a-z]+", text.lower()) if len(w) > 2 and w not in STOP}


def name_words(tools: list[dict]) -> set[str]:
    return {w.rstrip("s") for t in tools for w in tokens(t["name"]) if len(w) > 2}


def apart(a: dict, b: dict) -> bool:
    """No word of one BFCL item's function names is in the other's function names or question."""
    na, nb = name_words(a["tools"]), name_words(b["tools"])
    return not (na & nb or na & words(b["text"]) or nb & words(a["text"]))


# -- SGD ---------------------------------------------------------------------------------------------------------


def sgd_items(shared: Path) -> list[dict]:
    rng = random.Random(f"{SEED}:sgd")
    schema = json.loads((shared / SGD_SCHEMA).read_text(encoding="utf-8"))
    dialogues = json.loads((shared / SGD_DIALOGUES).read_text(encoding="utf-8"))
    side = sides_of(SGD_DIALOGUES, shared)
    services: dict[str, list[dict]] = {}
    seen_names: set[str] = set()
    for service in sorted(schema, key=lambda s: s["service_name"]):
        names = {i["name"] for i in service["intents"]}
        if names & seen_names:  # Hotels_4, Movies_2: same intent names as Hotels_1, Media_2
            continue
        seen_names |= names
        services[service["service_name"]] = [
            {"name": i["name"],
             "description": f"{i['description']} ({service['service_name']}: {service['description']})"}
            for i in service["intents"]]
    firsts: dict[str, dict[str, list[tuple[str, str, str]]]] = {p: {} for p in SIDES}  # side -> service -> turns
    closings: dict[str, list[tuple[str, str]]] = {p: [] for p in SIDES}
    closing_seen: set[str] = set()
    for d in sorted(dialogues, key=lambda d: d["dialogue_id"]):
        part = side.get(d["dialogue_id"])
        if part not in SIDES:
            continue
        user = [t for t in d["turns"] if t["speaker"] == "USER"]
        frames = user[0]["frames"]
        intents = [f["state"]["active_intent"] for f in frames if f["state"]["active_intent"] != "NONE"]
        if len(frames) == 1 and len(intents) == 1:
            firsts[part].setdefault(frames[0]["service"], []).append(
                (d["dialogue_id"], user[0]["utterance"], intents[0]))
        acts = {a["act"] for f in user[-1]["frames"] for a in f["actions"]}
        text = " ".join(user[-1]["utterance"].split())
        if len(user) > 1 and acts <= {"THANK_YOU", "GOODBYE", "NEGATE"} and text.lower() not in closing_seen:
            closing_seen.add(text.lower())
            closings[part].append((d["dialogue_id"], text))
    out = []

    def tool_list(needed: list[str], extra: int, exclude: set[str] = frozenset()) -> list[dict]:
        pool = [s for s in services if s not in needed and s not in exclude]
        chosen = needed + rng.sample(pool, extra)
        tools = [t for s in chosen for t in services[s]]
        rng.shuffle(tools)
        return tools

    for part in SIDES:
        by_service = {s: list(v) for s, v in sorted(firsts[part].items())}
        for turns in by_service.values():
            rng.shuffle(turns)
        cursor = {s: 0 for s in by_service}

        def draw(service: str) -> tuple[str, str, str]:
            turns = by_service[service]
            cursor[service] += 1
            return turns[(cursor[service] - 1) % len(turns)]  # reused only when a service has few dialogues

        names = sorted(by_service)
        singles = [names[n % len(names)] for n in range(SGD_PER_SIDE["one"])]
        for n, service in enumerate(singles):
            key, text, intent = draw(service)
            out.append(item(f"sgd-{part}-one-{n + 1:02d}", "sgd", tool_list([service], rng.randint(2, 4)), text,
                            [intent], [f"{SGD_DIALOGUES}:{key}"]))
        combos = [list(c) for size in (2, 3) for c in _combinations(names, size)]
        for n in range(SGD_PER_SIDE["join"]):
            chosen = combos[n % len(combos)]
            rng.shuffle(chosen)
            turns = [draw(s) for s in chosen]
            out.append(item(f"sgd-{part}-join-{n + 1:02d}", "sgd", tool_list(chosen, rng.randint(1, 3)),
                            join([t[1] for t in turns], rng), [t[2] for t in turns],
                            [f"{SGD_DIALOGUES}:{t[0]}" for t in turns]))
        pool = list(closings[part])
        rng.shuffle(pool)
        for n, (key, text) in enumerate(pool[:SGD_PER_SIDE["closing"]]):
            service = next(d["services"][0] for d in dialogues if d["dialogue_id"] == key)
            out.append(item(f"sgd-{part}-none-{n + 1:02d}", "sgd", tool_list([service], rng.randint(2, 3)), text, [],
                            [f"{SGD_DIALOGUES}:{key}"]))
        for n in range(SGD_PER_SIDE["absent"]):
            service = names[n % len(names)]
            key, text, _ = draw(service)
            out.append(item(f"sgd-{part}-none-{SGD_PER_SIDE['closing'] + n + 1:02d}", "sgd",
                            tool_list([], rng.randint(3, 5), exclude={service}), text, [],
                            [f"{SGD_DIALOGUES}:{key}"]))
    return out


def _combinations(names: list[str], size: int) -> list[tuple[str, ...]]:
    from itertools import combinations

    return list(combinations(names, size))


# -- NLSI --------------------------------------------------------------------------------------------------------


def nlsi_turns(utterance: str) -> list[tuple[str, str]]:
    turns = []
    for line in utterance.strip().splitlines():
        role, _, text = line.partition(":")
        if role.strip() not in ("User", "Agent") or not text.strip():
            if not turns:
                return []
            turns[-1] = (turns[-1][0], turns[-1][1] + " " + line.strip())
            continue
        turns.append(("user" if role.strip() == "User" else "assistant", " ".join(text.split())))
    return turns if turns and turns[-1][0] == "user" else []


def nlsi_items(shared: Path) -> list[dict]:
    rng = random.Random(f"{SEED}:nlsi")
    catalogue = json.loads(NLSI_CATALOGUE.read_text(encoding="utf-8"))
    tools = {f["name"]: {"name": f["name"], "description": f["description"]} for f in catalogue["functions"]}
    rows = json.loads((shared / NLSI).read_text(encoding="utf-8"))
    side = sides_of(NLSI, shared)
    keys = _splits.unique_ids(str(r["example_id"]) for r in rows)
    data: dict[str, list[tuple[str, list[tuple[str, str]], str]]] = {p: [] for p in SIDES}
    for key, r in zip(keys, rows):
        names = [c.split("(", 1)[0].strip() for c in r["api_calls"]]
        called = sorted({NLSI_NAMES.get(n, n) for n in names})
        turns = nlsi_turns(r["user_utterance"])
        # Items whose gold calls two APIs get the second from a standing instruction, not from the message: left out.
        if side.get(key) in SIDES and len(called) == 1 and called[0] in tools and turns:
            data[side[key]].append((key, turns, called[0]))

    def siblings(name: str) -> set[str]:
        return set().union(*(s for s in NLSI_SIBLINGS if name in s)) | {name}

    def tool_list(needed: list[str], size: int, avoid: set[str] = frozenset()) -> list[dict]:
        pool = [n for n in sorted(tools) if n not in needed and n not in avoid]
        chosen = needed + rng.sample(pool, max(0, size - len(needed)))
        out = [tools[n] for n in chosen]
        rng.shuffle(out)
        return out

    out = []
    for part in SIDES:
        pool = sorted(data[part], key=lambda x: int(x[0].split("#")[0]))
        rng.shuffle(pool)
        for n in range(NLSI_PER_SIDE["one"]):
            key, turns, name = pool.pop(0)
            out.append(item(f"nlsi-{part}-one-{n + 1:02d}", "nlsi", tool_list([name], rng.randint(5, 8)), turns,
                            [name], [f"{NLSI}:{key}"]))
        n = 0
        for size, count in sorted(NLSI_PER_SIDE["join"].items()):
            for _ in range(count):
                chosen: list[tuple[str, list[tuple[str, str]], str]] = []
                for candidate in list(pool):
                    if len(chosen) == size:
                        break
                    key, turns, name = candidate
                    if len(turns) == 1 and not any(siblings(name) & siblings(c[2]) for c in chosen):
                        chosen.append(candidate)
                        pool.remove(candidate)
                n += 1
                names = [c[2] for c in chosen]
                out.append(item(f"nlsi-{part}-join-{n:02d}", "nlsi", tool_list(names, rng.randint(size + 3, size + 5)),
                                join([c[1][0][1] for c in chosen], rng), names, [f"{NLSI}:{c[0]}" for c in chosen]))
        for n in range(NLSI_PER_SIDE["none"]):
            key, turns, name = pool.pop(0)
            out.append(item(f"nlsi-{part}-none-{n + 1:02d}", "nlsi", tool_list([], rng.randint(5, 7), siblings(name)),
                            turns, [], [f"{NLSI}:{key}"]))
    return out


# -- hand-written ------------------------------------------------------------------------------------------------


def hand_items() -> list[dict]:
    out = []
    for domain, spec in HAND.items():
        tools = [{"name": n, "description": d} for n, d in spec["tools"]]
        for i, (messages, expected) in enumerate(spec["items"]):
            out.append(item(f"{domain}-{i + 1:02d}", domain, tools, messages, expected, []))
    return out


def records(shared: Path) -> list[dict]:
    rows = hand_items() + bfcl_items(shared) + sgd_items(shared) + nlsi_items(shared)
    ids = [r["id"] for r in rows]
    assert len(set(ids)) == len(ids)
    return rows


def render(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def counts(rows: list[dict]) -> str:
    from collections import Counter

    by = Counter((r["domain"], len(r["expected"])) for r in rows)
    domains = sorted({d for d, _ in by})
    lines = [f"{len(rows)} items; by domain and number of expected tools:"]
    for d in domains:
        lines.append(f"  {d}: " + ", ".join(f"{k}: {by[d, k]}" for k in range(5) if by[d, k]))
    total = Counter(len(r["expected"]) for r in rows)
    lines.append("  all: " + ", ".join(f"{k}: {total[k]}" for k in sorted(total)))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", help="../shared/data (default: beside the checkout, or PREFCALL_SHARED_DATA)")
    parser.add_argument("--check", action="store_true", help="exit 1 when items.jsonl differs from what it builds")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    rows = records(shared_dir(args.data_dir))
    text = render(rows)
    if args.check:
        same = Path(args.out).is_file() and Path(args.out).read_text(encoding="utf-8") == text
        print(f"{args.out} is {'up to date' if same else 'stale: run the build'}")
        return 0 if same else 1
    Path(args.out).write_text(text, encoding="utf-8")
    print(counts(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
