"""Build tests/data/nlt/{dev,report}.jsonl from the hand-written items below (deterministic; no model, no
other data set). Run: python tests/data/nlt/build.py. See README.md in this folder."""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Each domain: a context (the host's system description), its tools (name + description), and items.
# An item is (messages, expected): messages are (role, text) pairs ending with the user's turn, or one string
# for a single user message; expected is the list of tools that must be used ([] = no tool).
DOMAINS: dict[str, dict] = {}

DOMAINS["support"] = {
    "context": "You are the customer support assistant of Northwind, an online store that sells home goods.",
    "tools": [
        ("track_order", "Looks up the shipping status and delivery estimate of an order the customer already placed."),
        ("start_return", "Starts a return or refund for an item the customer received."),
        ("update_address", "Changes the shipping or billing address saved on the customer's account."),
        ("search_products", "Searches the store's catalogue for products the customer may want to buy."),
        ("escalate_to_human", "Transfers the conversation to a human support agent."),
    ],
    "items": [
        ("Where is my order #4471? It was supposed to arrive Monday.", ["track_order"]),
        ("The lamp I got is cracked, I want my money back.", ["start_return"]),
        ("Hi there!", []),
        ("I moved last week, please change my address to 18 Birch Lane, Leeds.", ["update_address"]),
        ("Do you have any wool blankets in dark green?", ["search_products"]),
        ("Thanks, the package arrived yesterday and everything looks great.", []),
        ("I've asked three times already. Let me talk to a real person.", ["escalate_to_human"]),
        ("Has my parcel shipped yet? And while you're at it, update my billing address to 5 Quay Street.",
         ["track_order", "update_address"]),
        ("What are your opening hours for the phone line?", []),
        ([("user", "The kettle I ordered doesn't heat up."),
          ("assistant", "I'm sorry to hear that. Would you like to return it for a refund?"),
          ("user", "Yes, please do that.")], ["start_return"]),
        ("I returned a vase last year and the process was really smooth, just wanted to say that.", []),
        ("Send the chair back for a refund and find me a sturdier one instead.", ["start_return", "search_products"]),
    ],
}

DOMAINS["calendar"] = {
    "context": "You are a scheduling assistant with access to the user's work calendar.",
    "tools": [
        ("create_event", "Adds a new meeting or event to the user's calendar at a given date and time."),
        ("list_events", "Shows the events already on the user's calendar for a day or a period."),
        ("cancel_event", "Removes an existing event from the user's calendar."),
        ("set_reminder", "Sets a reminder notification for the user at a given time."),
    ],
    "items": [
        ("Put a dentist appointment on my calendar for Thursday at 3pm.", ["create_event"]),
        ("What do I have going on tomorrow?", ["list_events"]),
        ("Cancel my 10 o'clock with Priya.", ["cancel_event"]),
        ("Remind me at 6 to call my mom.", ["set_reminder"]),
        ("Meetings are exhausting, honestly. Do you ever get tired?", []),
        ("How many weeks are there in a year?", []),
        ("Schedule a team lunch on Friday at noon and remind me an hour before.", ["create_event", "set_reminder"]),
        ("Am I free on the 14th in the afternoon?", ["list_events"]),
        ("Good morning!", []),
        ("Drop the standup on Wednesday and book a one-on-one with Sam in that slot instead.",
         ["cancel_event", "create_event"]),
        ("My calendar used to be a mess but it's much better organised these days.", []),
        ([("user", "I need to see the optician."),
          ("assistant", "Sure. When would you like the appointment?"),
          ("user", "Next Tuesday at 9 in the morning.")], ["create_event"]),
    ],
}

DOMAINS["smart_home"] = {
    "context": "You are a home assistant connected to the devices in the user's house.",
    "tools": [
        ("set_thermostat", "Sets the target temperature of the heating or air conditioning."),
        ("control_lights", "Turns lights on or off or dims them in a room."),
        ("lock_door", "Locks or unlocks the smart locks on the house's doors."),
        ("play_music", "Plays music, a playlist or a radio station on the house's speakers."),
        ("show_camera", "Shows the live feed of a security camera."),
    ],
    "items": [
        ("It's freezing in here, bump the heat up to 22 degrees.", ["set_thermostat"]),
        ("Turn off the kitchen lights.", ["control_lights"]),
        ("Did I lock the front door? Lock it just in case.", ["lock_door"]),
        ("Play some jazz in the living room.", ["play_music"]),
        ("Who's at the door? Show me the porch camera.", ["show_camera"]),
        ("What's a good temperature to keep a house at in winter to save energy?", []),
        ("I'm going to bed: lock up and switch off all the lights.", ["lock_door", "control_lights"]),
        ("Thank you, that's perfect.", []),
        ("My neighbour just installed the same smart lights as us, funny coincidence.", []),
        ("Dim the bedroom lights to 30 percent and put on my sleep playlist.", ["control_lights", "play_music"]),
        ("Can you tell me a joke?", []),
        ([("user", "Is the back door open?"),
          ("assistant", "The back door is currently unlocked."),
          ("user", "Ok, lock it then.")], ["lock_door"]),
    ],
}

DOMAINS["banking"] = {
    "context": "You are the virtual assistant of Meridian Bank, helping customers with their accounts.",
    "tools": [
        ("get_balance", "Returns the current balance of one of the customer's accounts."),
        ("transfer_money", "Moves money between the customer's accounts or to another person."),
        ("list_transactions", "Lists recent transactions (payments, deposits) on an account."),
        ("pay_bill", "Pays a utility or credit card bill from the customer's account."),
        ("freeze_card", "Blocks a debit or credit card that is lost, stolen or compromised."),
    ],
    "items": [
        ("How much money do I have in checking?", ["get_balance"]),
        ("Send 50 pounds to my sister Anna.", ["transfer_money"]),
        ("I lost my credit card on the train, block it right away!", ["freeze_card"]),
        ("What did I spend at the supermarket last week?", ["list_transactions"]),
        ("Pay my electricity bill, it's due tomorrow.", ["pay_bill"]),
        ("What's the difference between APR and interest rate?", []),
        ("Hello, is anyone there?", []),
        ("Check my savings balance and move 200 from savings into checking.", ["get_balance", "transfer_money"]),
        ("My friend says transferring money abroad is always expensive. Is that true in general?", []),
        ("There's a charge I don't recognise from yesterday. Show me my recent payments and block my debit card.",
         ["list_transactions", "freeze_card"]),
        ("Great, thanks for your help today.", []),
        ([("user", "I need to settle my phone bill."),
          ("assistant", "Which account should I pay it from?"),
          ("user", "From my main current account.")], ["pay_bill"]),
    ],
}

DOMAINS["travel"] = {
    "context": "You are a travel agent assistant that plans and books trips for the user.",
    "tools": [
        ("search_flights", "Finds flights between two cities on given dates."),
        ("book_hotel", "Searches and books hotel rooms in a city."),
        ("rent_car", "Reserves a rental car at a pickup location."),
        ("get_weather", "Gives the weather forecast for a city."),
        ("convert_currency", "Converts an amount of money from one currency to another."),
    ],
    "items": [
        ("Find me a flight from Boston to Lisbon on May 3rd.", ["search_flights"]),
        ("I need a room in Kyoto for three nights starting Friday.", ["book_hotel"]),
        ("Will it rain in Rome this weekend?", ["get_weather"]),
        ("How much is 300 dollars in euros?", ["convert_currency"]),
        ("I love window seats, watching the clouds is the best part of flying.", []),
        ("What's the capital of Australia?", []),
        ("Book me a hotel in Madrid and a car I can pick up at the airport.", ["book_hotel", "rent_car"]),
        ("I'd like to rent an SUV in Denver from the 10th to the 15th.", ["rent_car"]),
        ("Thanks, that's all for now.", []),
        ("Look for flights to Oslo next Monday and tell me what the weather will be like there.",
         ["search_flights", "get_weather"]),
        ("My last hotel stay in Vienna was lovely, the staff were so kind.", []),
        ([("user", "I'm going to Tokyo in June."),
          ("assistant", "How exciting! Do you need anything for the trip?"),
          ("user", "Yes, somewhere to stay near Shinjuku.")], ["book_hotel"]),
    ],
}

DOMAINS["coding"] = {
    "context": "You are a coding assistant working inside the user's software repository.",
    "tools": [
        ("search_code", "Searches the repository's source files for a symbol, string or pattern."),
        ("run_tests", "Runs the project's test suite, or some of its tests, and reports failures."),
        ("read_file", "Opens a file of the repository and shows its contents."),
        ("git_commit", "Commits the staged changes to git with a message."),
        ("search_docs", "Searches online documentation for a library or API."),
    ],
    "items": [
        ("Where is the function parse_config defined?", ["search_code"]),
        ("Run the unit tests for the payments module.", ["run_tests"]),
        ("Show me what's in setup.cfg.", ["read_file"]),
        ("Commit these changes with the message 'fix off-by-one in pager'.", ["git_commit"]),
        ("How do I use asyncio.gather with a timeout? Check the Python docs.", ["search_docs"]),
        ("What's the difference between a list and a tuple in Python?", []),
        ("Nice, all green now. Thanks!", []),
        ("Find every call to retry_request and then run the tests to see if anything breaks.",
         ["search_code", "run_tests"]),
        ("I've been writing tests first lately and I think it makes me slower. Is TDD worth it?", []),
        ("Open README.md and commit the typo fix I just staged.", ["read_file", "git_commit"]),
        ("Hey, how's it going?", []),
        ([("user", "The CI failed on my branch."),
          ("assistant", "Do you want me to run the test suite locally to see which tests fail?"),
          ("user", "Yes go ahead.")], ["run_tests"]),
    ],
}

DOMAINS["health"] = {
    "context": "You are the patient assistant of a family medical practice.",
    "tools": [
        ("book_appointment", "Books an appointment with a doctor or nurse at the practice."),
        ("refill_prescription", "Requests a refill of a medication the patient is already prescribed."),
        ("find_pharmacy", "Finds pharmacies near a location and their opening hours."),
        ("log_symptoms", "Records symptoms in the patient's health diary for the doctor to review."),
    ],
    "items": [
        ("I need to see Dr. Patel sometime next week.", ["book_appointment"]),
        ("I'm almost out of my blood pressure pills, can I get a refill?", ["refill_prescription"]),
        ("Is there a pharmacy open late near Market Street?", ["find_pharmacy"]),
        ("Please note that I had a headache and mild fever since this morning.", ["log_symptoms"]),
        ("How much water should an adult drink per day?", []),
        ("Hi, good afternoon.", []),
        ("Refill my inhaler prescription and tell me which pharmacy nearby is open on Sunday.",
         ["refill_prescription", "find_pharmacy"]),
        ("My grandmother always said chicken soup cures a cold, haha.", []),
        ("I've had a sore throat for five days. Write that down and get me an appointment with a doctor.",
         ["log_symptoms", "book_appointment"]),
        ("Can I get a check-up slot on Thursday morning?", ["book_appointment"]),
        ("Thanks for reminding me last time, I did take my medication on time.", []),
        ([("user", "My allergy tablets ran out."),
          ("assistant", "Would you like me to request a refill of your cetirizine prescription?"),
          ("user", "Yes please.")], ["refill_prescription"]),
    ],
}

DOMAINS["restaurant"] = {
    "context": "You are a dining assistant that helps the user find places to eat and order food.",
    "tools": [
        ("search_restaurants", "Finds restaurants in an area by cuisine, price or rating."),
        ("make_reservation", "Reserves a table at a restaurant for a date, time and party size."),
        ("order_delivery", "Orders food for delivery to the user's address."),
        ("get_menu", "Shows the menu and prices of a specific restaurant."),
    ],
    "items": [
        ("Any good Thai places around Soho?", ["search_restaurants"]),
        ("Book a table for four at Luigi's tonight at 8.", ["make_reservation"]),
        ("Get me a large pepperoni pizza delivered home.", ["order_delivery"]),
        ("What's on the menu at Green Bowl?", ["get_menu"]),
        ("I had the best ramen of my life in Osaka years ago.", []),
        ("How do you make a simple tomato sauce?", []),
        ("Find a vegan restaurant near the office and reserve a table for two at 1pm.",
         ["search_restaurants", "make_reservation"]),
        ("Cheers, enjoy your evening!", []),
        ("Let me check the prices at Sushi Nami first, then order the salmon set for delivery.",
         ["get_menu", "order_delivery"]),
        ("Is tipping expected in restaurants in Japan?", []),
        ("We're six people, can you reserve at Casa Blanca for Saturday 7:30?", ["make_reservation"]),
        ([("user", "I'm starving but too tired to go out."),
          ("assistant", "I can order something for you. What would you like?"),
          ("user", "Pad thai from the usual place.")], ["order_delivery"]),
    ],
}

DOMAINS["email"] = {
    "context": "You are an office assistant with access to the user's email and task list.",
    "tools": [
        ("send_email", "Writes and sends an email to one or more recipients."),
        ("search_inbox", "Searches the user's received emails by sender, subject or content."),
        ("create_task", "Adds a to-do item to the user's task list."),
        ("summarize_document", "Summarises a document or attachment the user points to."),
    ],
    "items": [
        ("Email Marco that the report will be late by a day.", ["send_email"]),
        ("Did HR send me anything about the holiday schedule?", ["search_inbox"]),
        ("Add 'renew passport' to my to-do list.", ["create_task"]),
        ("Give me the key points of the Q3 budget PDF.", ["summarize_document"]),
        ("Writing emails takes up half my day, it's ridiculous.", []),
        ("What's a polite way to end a formal letter?", []),
        ("Find the email from Lena about the offsite and reply to her that I'll attend.",
         ["search_inbox", "send_email"]),
        ("Good night!", []),
        ("Summarise the contract draft and add a task to review it with legal on Monday.",
         ["summarize_document", "create_task"]),
        ("Remind me what the word 'cc' stands for in email.", []),
        ("Look for the invoice Dropbox sent in March.", ["search_inbox"]),
        ([("user", "I promised the team I'd share the slides."),
          ("assistant", "Shall I email the slides to the team?"),
          ("user", "Yes, send them to team@acme.com.")], ["send_email"]),
    ],
}



def is_dev(position_in_group: int) -> bool:
    """Per domain and per kind (no tool / one tool / two tools), the 2nd and 4th item of each run of five go to
    dev: 5 of a domain's 12 items (about 40%), with every kind on both sides."""
    return position_in_group % 5 in (1, 3)


def records() -> list[dict]:
    out = []
    for domain, spec in DOMAINS.items():
        tools = [{"name": n, "description": d} for n, d in spec["tools"]]
        names = {t["name"] for t in tools}
        seen: dict[int, int] = {}
        for i, (messages, expected) in enumerate(spec["items"]):
            kind = len(expected)
            position, seen[kind] = seen.get(kind, 0), seen.get(kind, 0) + 1
            turns = [("user", messages)] if isinstance(messages, str) else messages
            assert turns[-1][0] == "user" and set(expected) <= names, (domain, i)
            out.append({
                "id": f"{domain}-{i + 1:02d}",
                "domain": domain,
                "split": "dev" if is_dev(position) else "report",
                "context": spec["context"],
                "tools": tools,
                "messages": [{"role": r, "content": t} for r, t in turns],
                "expected": list(expected),
            })
    return out


def main() -> None:
    rows = records()
    for split in ("dev", "report"):
        chosen = [r for r in rows if r["split"] == split]
        with (HERE / f"{split}.jsonl").open("w", encoding="utf-8") as fh:
            for row in chosen:
                fh.write(json.dumps({k: v for k, v in row.items() if k != "split"}, ensure_ascii=False) + "\n")
        none = sum(not r["expected"] for r in chosen)
        two = sum(len(r["expected"]) == 2 for r in chosen)
        print(f"{split}: {len(chosen)} items, {none} need no tool, {two} need two tools")


if __name__ == "__main__":
    main()
