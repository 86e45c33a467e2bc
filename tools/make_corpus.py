"""Generate tinylm's shipped corpus: everyday dialogues (pretraining) and chat turns (fine-tuning).

Nothing is downloaded: every sentence comes from the templates and word lists in this file, filled in by
a seeded `random.Random`, so the same seed always gives byte-identical files.

    python tools/make_corpus.py                 # writes tinylm/data/{dialogues.txt, chat.jsonl, README.md}
    python tools/make_corpus.py --seed 1 --out /tmp/corpus

The text is deliberately repetitive: a few dozen topics, a vocabulary of under two thousand words, and
fixed facts (prices on the café menu, what each job is, the capital of each country, small sums) that a
model of a few million parameters can visibly learn.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

# ---------------------------------------------------------------------------------------------
# Word lists and fixed facts
# ---------------------------------------------------------------------------------------------
NAMES = [
    "Anna", "Ben", "Clara", "David", "Emma", "Felix", "Grace", "Hugo", "Iris", "Jack", "Kate", "Leo",
    "Lily", "Max", "Mia", "Noah", "Olivia", "Paul", "Rosa", "Sam", "Sara", "Tom", "Nina", "Omar",
    "Priya", "Ravi", "Yuki", "Lucas", "Elena", "Marco", "Zoe", "Adam", "Chloe", "Daniel", "Ella", "Finn",
    "Hannah", "Isaac", "Julia", "Kai", "Laura", "Mateo", "Nora", "Oscar", "Ruth", "Simon", "Tara", "Victor",
    "Alice", "Bruno", "Carmen", "Dmitri", "Esther", "Fatima", "Georg", "Helen", "Ivan", "Jonas", "Karin", "Lena",
    "Miguel", "Naomi", "Otto", "Pablo", "Quinn", "Rita", "Stefan", "Theo", "Ursula", "Vera", "Walter", "Xavier",
    "Yasmin", "Zack", "Amir", "Bianca", "Carlos", "Diana", "Emil", "Freya", "Gabriel", "Hiro", "Ingrid", "Jamal",
    "Kofi", "Linda", "Mohammed", "Nadia", "Olga", "Peter", "Rafael", "Sofia", "Tobias", "Uma", "Wendy", "Yusuf",
    "Aisha", "Boris", "Cecilia", "Dario", "Eva", "Frank", "Gina", "Henrik", "Irene", "Joao", "Katya", "Luis",
    "Agnes", "Arthur", "Beatrice", "Caleb", "Dora", "Edgar", "Flora", "Gustav", "Harriet", "Ibrahim", "Jasper",
    "Keiko", "Leon", "Matilda", "Nikolai", "Ophelia", "Patrick", "Rosalind", "Sebastian", "Thea", "Ulrich",
    "Valentina", "William", "Ximena", "Yara", "Zara", "Andrea", "Bernard", "Camille", "Desmond", "Elsa",
    "Francesca", "Gregor", "Heidi", "Ines", "Joaquin", "Klara", "Lorenzo", "Magnus", "Nikhil", "Odette",
    "Philippa", "Raymond", "Selma", "Tariq", "Veronica", "Wilhelm", "Yosef", "Zainab", "Anton", "Brigitte",
    "Cormac", "Delphine", "Eamon", "Fiona", "Gideon", "Hamid", "Imogen", "Jules", "Kasper", "Leila", "Malik",
    "Nell", "Orla", "Piotr", "Ronan", "Siobhan", "Tomas", "Viktor", "Wanda", "Yannick", "Zofia", "Aurora",
    "Benedict", "Cosima", "Dominic", "Eliza", "Florian", "Greta", "Horatio", "Isolde", "Juniper", "Kenji",
    "Lucia", "Milan", "Nils", "Oona", "Quentin", "Rupert", "Saskia", "Thaddeus", "Vivian", "Wolfgang",
]

CAPITALS = [  # (city, country)
    ("Paris", "France"), ("Rome", "Italy"), ("Madrid", "Spain"), ("Berlin", "Germany"),
    ("Lisbon", "Portugal"), ("London", "England"), ("Dublin", "Ireland"), ("Vienna", "Austria"),
    ("Athens", "Greece"), ("Oslo", "Norway"), ("Stockholm", "Sweden"), ("Helsinki", "Finland"),
    ("Copenhagen", "Denmark"), ("Warsaw", "Poland"), ("Prague", "Czechia"), ("Tokyo", "Japan"),
    ("Seoul", "Korea"), ("Beijing", "China"), ("Cairo", "Egypt"), ("Nairobi", "Kenya"),
    ("Ottawa", "Canada"), ("Lima", "Peru"), ("Canberra", "Australia"), ("Brussels", "Belgium"),
    ("Amsterdam", "the Netherlands"), ("Bern", "Switzerland"), ("Budapest", "Hungary"),
    ("Bangkok", "Thailand"), ("Santiago", "Chile"), ("Wellington", "New Zealand"),
    ("Reykjavik", "Iceland"), ("Tallinn", "Estonia"), ("Riga", "Latvia"), ("Vilnius", "Lithuania"),
    ("Bucharest", "Romania"), ("Zagreb", "Croatia"), ("Ljubljana", "Slovenia"), ("Bratislava", "Slovakia"),
    ("Belgrade", "Serbia"), ("Ankara", "Turkey"), ("Hanoi", "Vietnam"), ("Manila", "the Philippines"),
    ("Jakarta", "Indonesia"), ("Kathmandu", "Nepal"), ("Havana", "Cuba"), ("Bogota", "Colombia"),
    ("Quito", "Ecuador"), ("Montevideo", "Uruguay"), ("Accra", "Ghana"), ("Dakar", "Senegal"),
    ("Rabat", "Morocco"), ("Tunis", "Tunisia"), ("Brasilia", "Brazil"), ("Caracas", "Venezuela"),
    ("Valletta", "Malta"), ("Kyiv", "Ukraine"), ("Ulaanbaatar", "Mongolia"), ("Mexico City", "Mexico"),
]
QUIZ_CAPITALS = CAPITALS[:20]  # the capitals the quiz asks about: few enough to repeat and be learned
CITIES = [c for c, _ in CAPITALS] + ["Barcelona", "Milan", "Munich", "Porto", "Lyon", "Osaka", "Sydney",
                                     "Toronto", "Boston", "Chicago", "Edinburgh", "Zurich", "Hamburg",
                                     "Seville", "Valencia", "Naples", "Florence", "Venice", "Marseille", "Bordeaux",
                                     "Cologne", "Frankfurt", "Geneva", "Salzburg", "Krakow", "Gdansk", "Bergen",
                                     "Gothenburg", "Manchester", "Glasgow", "Cork", "Antwerp", "Rotterdam", "Kyoto",
                                     "Melbourne", "Vancouver", "Montreal", "Denver", "Seattle", "Istanbul", "Marrakesh"]

# weather: condition -> (temperature range in degrees, advice, a feeling)
WEATHER = {
    "sunny": ((18, 32), "Wear a hat and take some water.", "lovely"),
    "cloudy": ((8, 20), "A light jacket should be enough.", "a bit grey"),
    "rainy": ((5, 18), "Take an umbrella and wear boots.", "wet"),
    "windy": ((4, 16), "Wear a warm jacket that closes well.", "wild"),
    "snowy": ((-8, 1), "Wear a warm coat, a scarf and gloves.", "beautiful but cold"),
    "foggy": ((2, 12), "Drive slowly and take a light.", "strange"),
    "stormy": ((6, 20), "Stay inside if you can.", "scary"),
}
SEASONS = {"spring": "mild", "summer": "hot", "autumn": "cool", "winter": "cold"}

CAFE_MENU = {  # item -> price in euros (fixed, so the model can learn them)
    "coffee": 3, "tea": 2, "hot chocolate": 4, "orange juice": 4, "lemonade": 3, "water": 1,
    "croissant": 2, "muffin": 3, "sandwich": 6, "soup": 5, "salad": 7, "cake": 4, "pancakes": 6,
    "toast": 3, "omelette": 7, "pasta": 9, "pizza": 10, "burger": 9, "apple pie": 4, "ice cream": 3,
}
DRINKS = ["coffee", "tea", "hot chocolate", "orange juice", "lemonade", "water"]
FOODS = ["croissant", "muffin", "sandwich", "soup", "salad", "cake", "pancakes", "toast", "omelette",
         "pasta", "pizza", "burger", "apple pie", "ice cream"]
DISHES = ["pasta", "pizza", "soup", "rice with vegetables", "fish and chips", "chicken curry", "a salad",
          "tacos", "noodles", "a stew", "pancakes", "an omelette", "sushi", "roast chicken", "a sandwich",
          "lentil soup", "grilled fish", "a vegetable pie", "dumplings", "fried rice", "a burrito", "risotto",
          "paella", "goulash", "falafel", "a quiche", "lasagne", "spaghetti", "meatballs", "a baked potato",
          "a cheese sandwich", "pumpkin soup", "a bean salad", "couscous", "a spinach pie", "porridge",
          "scrambled eggs", "a fruit salad", "sausages and mash", "a tuna salad", "ramen", "a kebab"]
FRUITS = ["apples", "bananas", "oranges", "pears", "grapes", "strawberries", "cherries", "lemons",
          "peaches", "plums", "apricots", "melons", "raspberries", "blueberries", "kiwis", "mangoes", "figs"]
VEGETABLES = ["carrots", "potatoes", "tomatoes", "onions", "peppers", "beans", "peas", "mushrooms",
              "cucumbers", "leeks", "courgettes", "aubergines", "cabbages", "radishes", "beetroots",
              "asparagus", "broccoli", "cauliflowers", "garlic", "pumpkins"]
RECIPES = {  # dish -> ingredients, steps
    "pancakes": (["flour", "milk", "eggs", "a pinch of salt"],
                 ["Mix the flour, milk, eggs and salt.", "Heat a pan with a little butter.",
                  "Pour in some batter and cook each side for a minute."]),
    "tea": (["a tea bag", "hot water", "milk if you like"],
            ["Boil the water.", "Pour it over the tea bag.", "Wait three minutes, then take out the bag."]),
    "an omelette": (["eggs", "salt", "butter", "cheese if you like"],
                    ["Beat the eggs with a little salt.", "Melt the butter in a pan.",
                     "Pour in the eggs and cook them slowly, then fold the omelette."]),
    "a salad": (["lettuce", "tomatoes", "cucumber", "olive oil", "lemon"],
                ["Wash the vegetables.", "Cut them into small pieces.", "Add oil and lemon and mix."]),
    "rice": (["rice", "water", "salt"],
             ["Wash the rice.", "Cook it in twice as much water with a little salt.",
              "Cover the pot and wait about fifteen minutes."]),
    "soup": (["vegetables", "water", "salt", "an onion"],
             ["Cut the onion and the vegetables.", "Cook them in water for twenty minutes.",
              "Add salt and blend the soup."]),
    "toast": (["bread", "butter"],
              ["Put the bread in the toaster.", "Wait until it is golden.", "Spread some butter on it."]),
    "lemonade": (["lemons", "water", "sugar", "ice"],
                 ["Squeeze the lemons.", "Mix the juice with water and sugar.", "Add ice and serve."]),
}

SHOPS = {  # shop -> items sold there
    "bakery": ["bread", "rolls", "a cake", "cookies", "a baguette", "croissants"],
    "market": FRUITS + VEGETABLES,
    "supermarket": ["milk", "eggs", "rice", "pasta", "cheese", "butter", "coffee", "tea", "sugar", "flour"],
    "pharmacy": ["plasters", "cough drops", "sun cream", "tissues", "a toothbrush", "vitamins"],
    "bookshop": ["a novel", "a cookbook", "a map", "a notebook", "a dictionary", "a comic"],
    "clothes shop": ["a shirt", "a jumper", "a jacket", "a scarf", "a pair of shoes", "a hat", "a dress"],
}
COLORS = ["red", "blue", "green", "black", "white", "yellow", "grey", "brown", "pink", "purple", "orange",
          "beige", "navy", "gold", "silver", "turquoise", "violet", "cream", "olive", "maroon"]
SIZES = ["small", "medium", "large"]

JOBS = {  # job -> (workplace, what they do)
    "teacher": ("a school", "I teach children to read and write."),
    "nurse": ("a hospital", "I look after patients."),
    "doctor": ("a clinic", "I help people who are sick."),
    "cook": ("a restaurant", "I make food for the guests."),
    "baker": ("a bakery", "I bake bread every morning."),
    "farmer": ("a farm", "I grow vegetables and keep cows."),
    "pilot": ("an airline", "I fly planes."),
    "bus driver": ("the bus company", "I drive a bus around the city."),
    "engineer": ("a factory", "I design machines."),
    "librarian": ("the library", "I help people find books."),
    "programmer": ("an office", "I write software."),
    "gardener": ("the park", "I look after the plants and trees."),
    "mechanic": ("a garage", "I fix cars."),
    "waiter": ("a cafe", "I serve food and drinks."),
    "vet": ("an animal clinic", "I look after sick animals."),
    "firefighter": ("the fire station", "I put out fires."),
    "postman": ("the post office", "I bring letters to people."),
    "artist": ("a studio", "I paint pictures."),
    "dentist": ("a dental practice", "I check and repair teeth."),
    "journalist": ("a newspaper", "I write articles about the news."),
    "electrician": ("a building company", "I install lights and wires."),
    "plumber": ("a small company", "I repair pipes and taps."),
    "photographer": ("a studio", "I take photos at weddings."),
    "accountant": ("a bank", "I check numbers and taxes."),
    "carpenter": ("a workshop", "I make tables and chairs."),
    "hairdresser": ("a salon", "I cut and colour hair."),
    "musician": ("an orchestra", "I play the violin."),
    "scientist": ("a laboratory", "I do experiments."),
    "translator": ("home", "I translate books and letters."),
    "receptionist": ("a hotel", "I welcome the guests."),
    "shop assistant": ("a shop", "I help customers."),
    "student": ("the university", "I study and go to lectures."),
}
WORK_THINGS = ["the report", "the new website", "the budget", "the meeting notes", "the presentation",
               "the schedule", "the project plan", "the order list", "the email to the client", "the slides"]

HOBBIES = {  # activity (after "I like to") -> (place, what you need)
    "play football": ("in the park", "a ball"),
    "play tennis": ("at the club", "a racket"),
    "play chess": ("at home", "a chess board"),
    "play the guitar": ("in my room", "a guitar"),
    "play the piano": ("in the living room", "a piano"),
    "read": ("on the sofa", "a good book"),
    "paint": ("in the garden", "paints and brushes"),
    "cook": ("in the kitchen", "fresh food"),
    "go hiking": ("in the mountains", "good boots"),
    "swim": ("at the pool", "a swimsuit"),
    "run": ("by the river", "running shoes"),
    "take photos": ("in the old town", "a camera"),
    "dance": ("at the dance school", "comfortable shoes"),
    "sing": ("in a choir", "a good voice"),
    "ride my bike": ("along the coast", "a helmet"),
    "knit": ("by the window", "wool and needles"),
    "go fishing": ("at the lake", "a fishing rod"),
    "watch films": ("at the cinema", "some popcorn"),
    "do pottery": ("at a workshop", "clay and an apron"),
    "write poems": ("in a cafe", "a pen and a notebook"),
    "bake bread": ("in the kitchen", "flour, yeast and patience"),
    "play volleyball": ("on the beach", "a ball and a net"),
    "go birdwatching": ("in the wetlands", "binoculars"),
    "solve crosswords": ("on the train", "a pencil"),
    "do yoga": ("in the living room", "a yoga mat"),
    "go skating": ("at the ice rink", "skates"),
    "build model trains": ("in the garage", "glue and tiny tools"),
    "collect stamps": ("at home", "an album and tweezers"),
}
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
                "nineteen", "twenty"]

COLOR_OF = {"the sky": "blue", "grass": "green", "snow": "white", "a banana": "yellow", "a tomato": "red",
            "an orange": "orange", "coal": "black", "a lemon": "yellow", "milk": "white", "a strawberry": "red",
            "the sea": "blue", "a leaf": "green", "chocolate": "brown", "a carrot": "orange"}
ANIMAL_SOUND = {"a dog": "barks", "a cat": "meows", "a cow": "moos", "a duck": "quacks", "a lion": "roars",
                "a sheep": "baas", "a horse": "neighs", "a bird": "sings", "a frog": "croaks", "an owl": "hoots"}
ANIMAL_LEGS = {"a dog": 4, "a cat": 4, "a bird": 2, "a spider": 8, "an ant": 6, "a horse": 4, "a duck": 2,
               "a fish": 0, "a snake": 0, "a cow": 4, "a bee": 6, "a chicken": 2}
OPPOSITES = {"hot": "cold", "big": "small", "up": "down", "day": "night", "fast": "slow", "old": "new",
             "happy": "sad", "early": "late", "open": "closed", "light": "dark", "full": "empty",
             "left": "right", "wet": "dry", "loud": "quiet", "easy": "hard", "long": "short"}
COUNTS = {("days", "in a week"): 7, ("months", "in a year"): 12, ("hours", "in a day"): 24,
          ("minutes", "in an hour"): 60, ("seconds", "in a minute"): 60, ("days", "in a year"): 365,
          ("legs", "on a table"): 4, ("wheels", "on a bike"): 2, ("wheels", "on a car"): 4,
          ("players", "in a football team"): 11}

FAMILY = ["brother", "sister", "cousin", "aunt", "uncle", "grandmother", "grandfather", "son", "daughter",
          "nephew", "niece"]
PETS = {  # animal -> what it eats
    "dog": "dog food and the odd sausage", "cat": "fish and cat food", "rabbit": "carrots and hay",
    "hamster": "seeds and nuts", "parrot": "seeds and fruit", "goldfish": "fish flakes",
    "tortoise": "lettuce and dandelions", "guinea pig": "hay and cucumber", "budgie": "millet and seeds",
}
PET_NAMES = ["Biscuit", "Luna", "Pepper", "Whiskers", "Bella", "Coco", "Rocky", "Ginger", "Shadow", "Milo",
             "Daisy", "Oreo", "Nugget", "Pickles", "Teddy", "Sunny", "Muffin", "Socks", "Bubbles", "Ziggy",
             "Pumpkin", "Marble", "Noodle", "Waffle", "Juniper", "Clover", "Hazel", "Fudge", "Pretzel", "Tofu",
             "Mango", "Pixel", "Rascal", "Snowball", "Thunder", "Button", "Caramel", "Domino", "Gizmo", "Koko"]
ROOMS = ["kitchen", "bedroom", "bathroom", "living room", "balcony", "garden", "hallway", "attic", "study"]
FURNITURE = ["sofa", "table", "bed", "lamp", "bookshelf", "wardrobe", "desk", "armchair", "mirror", "rug",
             "curtains", "fridge", "cupboard", "bench", "plant"]
ROOM_ADJECTIVES = ["bright", "cosy", "quiet", "spacious", "tiny", "noisy", "modern", "old", "warm", "sunny",
                   "dark", "comfortable", "tidy", "messy"]
SYMPTOMS = {  # symptom -> advice
    "a headache": "Drink some water, rest in a dark room and take a painkiller if you need one.",
    "a sore throat": "Drink warm tea with honey and try not to talk too much.",
    "a cough": "Drink plenty of warm drinks and rest. See a doctor if it lasts more than a week.",
    "a fever": "Stay in bed, drink lots of water and call a doctor if it gets worse.",
    "a stomach ache": "Eat something light, like rice or toast, and drink small sips of water.",
    "back pain": "Move gently, avoid heavy lifting and try a warm bath.",
    "an earache": "Keep your ear warm and see a doctor if it does not get better in two days.",
    "a runny nose": "Keep tissues close, drink plenty of water and get some sleep.",
    "sunburn": "Stay out of the sun, cool the skin with water and use a soothing cream.",
}
PAST_ACTIVITIES = ["visited my grandparents", "cleaned the whole house", "watched a film", "baked a cake",
                   "went swimming", "read a whole book", "played cards with friends", "walked the dog",
                   "painted the fence", "repaired my bike", "tidied the garden", "went to a concert",
                   "visited a museum", "had a picnic in the park", "went shopping with my sister",
                   "slept a lot", "cooked dinner for my neighbours", "went to the beach", "climbed a hill",
                   "went to a wedding", "played board games", "learned a new song", "planted tomatoes",
                   "ran a marathon", "fixed the leaking tap", "drove to the countryside", "visited an old friend",
                   "went sailing on the lake", "sorted out the wardrobe", "wrote some postcards",
                   "went to a flea market", "tried a new restaurant", "redecorated the bedroom"]
FEELINGS = ["great", "relaxing", "boring", "fun", "tiring", "wonderful", "lovely", "busy", "quiet", "perfect"]
SUBJECTS = ["maths", "history", "biology", "chemistry", "physics", "geography", "art", "music", "English",
            "French", "Spanish", "German", "economics", "literature", "medicine", "law", "engineering"]
GENRES = {"comedy": "funny", "thriller": "exciting", "cartoon": "sweet", "documentary": "interesting",
          "horror film": "scary", "love story": "romantic", "science fiction film": "amazing",
          "western": "slow", "musical": "cheerful", "mystery": "clever"}
APPOINTMENTS = {"the dentist": "a check-up", "the doctor": "a check-up", "the hairdresser": "a haircut",
                "the optician": "an eye test", "the bank": "a meeting about a loan", "the vet": "a vaccination",
                "the garage": "a service for my car"}
GIFTS = ["a scarf", "flowers", "chocolates", "a board game", "a mug", "a plant", "a book", "a candle",
         "a photo frame", "a puzzle", "a cookbook", "socks", "a bottle of wine", "concert tickets", "a necklace"]
BUS_PLACES = ["the airport", "the city centre", "the university", "the zoo", "the harbour", "the stadium",
              "the old town", "the shopping centre"]
CLOTHES = ["jacket", "scarf", "hat", "shirt", "dress", "shoes", "bag", "jumper", "coat", "watch", "glasses"]

PERSON_ADJECTIVES = ["kind", "funny", "clever", "shy", "tall", "generous", "patient", "honest", "friendly",
                     "chatty", "calm", "brave", "polite", "creative", "curious", "cheerful", "quiet", "helpful",
                     "serious", "relaxed", "organised", "sporty", "thoughtful", "lively", "gentle", "stubborn"]
STREETS = ["Oak Street", "Maple Avenue", "Elm Road", "Cedar Lane", "Willow Close", "Chestnut Street",
           "Station Road", "Market Square", "Bridge Street", "Castle Hill", "Harbour Road", "Garden Lane",
           "Mill Lane", "King Street", "Queen Street", "High Street", "River Walk", "Church Road",
           "Orchard Way", "Lighthouse Road", "Foxglove Lane", "Sycamore Drive", "Primrose Hill", "Beacon Street",
           "Hawthorn Avenue", "Meadow Lane", "Quarry Road", "Windmill Street"]
NEW_PLACES = ["bakery", "bookshop", "cafe", "restaurant", "gym", "cinema", "library", "supermarket",
              "ice cream shop", "flower shop", "pizzeria", "swimming pool", "music school", "playground",
              "bicycle shop", "vegetarian restaurant", "climbing wall", "toy shop", "noodle bar", "bowling alley"]
LOST_THINGS = ["keys", "wallet", "umbrella", "phone", "glasses", "passport", "gloves", "ticket", "charger",
               "purse", "headphones", "notebook"]
FOUND_PLACES = ["under the sofa", "in the car", "at the office", "in your coat pocket", "on the kitchen table",
                "next to the door", "in the bathroom", "behind the cushions", "in your bag", "by the bed"]
LANGUAGES = ["French", "Spanish", "German", "Italian", "Portuguese", "Japanese", "Chinese", "Korean",
             "Arabic", "Russian", "Dutch", "Swedish", "Greek", "Polish", "Turkish", "Hindi"]
SPORTS = ["football", "basketball", "volleyball", "cycling", "skiing", "rowing", "climbing", "yoga", "boxing",
          "golf", "badminton", "table tennis", "karate", "surfing", "handball", "hockey", "sailing", "judo"]
CHORES = ["do the dishes", "take out the rubbish", "hoover the carpet", "water the plants", "iron the shirts",
          "feed the cat", "make the beds", "wash the car", "clean the windows", "hang up the washing",
          "mop the floor", "empty the dishwasher"]

MEANINGS = {  # word -> plain meaning (for "What does X mean?")
    "enormous": "very big", "tiny": "very small", "ancient": "very old", "delighted": "very happy",
    "furious": "very angry", "exhausted": "very tired", "freezing": "very cold", "boiling": "very hot",
    "starving": "very hungry", "terrified": "very scared", "hilarious": "very funny", "spotless": "very clean",
    "filthy": "very dirty", "gorgeous": "very beautiful", "brilliant": "very clever", "awful": "very bad",
    "fantastic": "very good", "silent": "making no sound", "rapid": "very fast", "sluggish": "slow and lazy",
    "generous": "happy to give", "stubborn": "not willing to change your mind", "curious": "wanting to know things",
    "anxious": "worried", "grateful": "thankful", "fragile": "easy to break", "vast": "very wide and large",
    "damp": "a little wet", "chilly": "a little cold", "cosy": "warm and comfortable", "bland": "without much taste",
    "crowded": "full of people", "deserted": "empty of people", "fierce": "wild and strong",
    "gloomy": "dark and sad", "humble": "not proud", "nervous": "a bit afraid", "peculiar": "strange",
    "punctual": "always on time", "reluctant": "not wanting to do something", "sturdy": "strong and solid",
    "thrilled": "very excited", "weary": "tired", "wealthy": "rich", "vivid": "bright and clear",
    "tidy": "neat and in order", "clumsy": "often dropping things", "drowsy": "sleepy", "eager": "keen to do something",
    "feeble": "weak", "jolly": "cheerful", "keen": "eager", "mighty": "very strong", "noisy": "making a lot of sound",
    "obvious": "easy to see", "precious": "worth a lot", "rough": "not smooth", "sensible": "wise and careful",
    "splendid": "excellent", "timid": "shy and easily scared", "vague": "not clear", "witty": "clever and funny",
    "zealous": "full of energy for a cause", "gigantic": "huge", "minute": "extremely small",
    "scorching": "extremely hot", "soaked": "completely wet", "famished": "extremely hungry",
    "baffled": "totally confused", "content": "quietly happy", "fortunate": "lucky", "hasty": "too quick",
    "idle": "doing nothing", "loyal": "always on your side", "modest": "not showing off", "tranquil": "calm and peaceful",
    "cautious": "careful", "daring": "brave and bold", "elegant": "stylish", "fragrant": "smelling nice",
}

DIRECTIONS = ["turn left", "turn right", "go straight on", "cross the street", "take the second street on the left",
              "take the first street on the right", "walk past the church"]
PLACES = ["the station", "the museum", "the post office", "the bank", "the library", "the market",
          "the hospital", "the park", "the cinema", "the town hall", "the bus stop", "the beach", "the castle"]


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------
def cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def num(n: int) -> str:
    return NUMBER_WORDS[n] if 0 <= n < len(NUMBER_WORDS) else str(n)


def an(word: str) -> str:
    """'apple pie' -> 'an apple pie', 'cake' -> 'a cake'."""
    return ("an " if word[0].lower() in "aeiou" else "a ") + word


def euros(n: int) -> str:
    return f"{num(n)} euro" + ("" if n == 1 else "s")


def clock(rng: random.Random, lo: int = 7, hi: int = 21) -> str:
    return f"{rng.randint(lo, hi)}:{rng.choice(['00', '15', '30', '45'])}"


def bare(item: str) -> str:
    """'a shirt' -> 'shirt', 'a pair of shoes' -> 'shoes', 'apples' -> 'apples'."""
    for article in ("a pair of ", "a ", "an "):
        if item.startswith(article):
            return item[len(article):]
    return item


# Every topic returns a list of (speaker, text): speaker 0 starts, 1 answers.
Turns = list[tuple[int, str]]


# ---------------------------------------------------------------------------------------------
# Dialogue topics
# ---------------------------------------------------------------------------------------------
def greeting(rng: random.Random, a: str, b: str) -> Turns:
    hello = rng.choice(["Hi", "Hello", "Hey", "Good morning", "Good afternoon", "Good evening"])
    how = rng.choice(["How are you?", "How are you today?", "How is it going?", "How have you been?",
                      "How are things?"])
    mood, reply = rng.choice([
        ("good", "I'm fine, thanks."), ("good", "Very well, thank you."), ("good", "Great, thanks!"),
        ("good", "Not bad at all."), ("tired", "A bit tired, to be honest."),
        ("busy", "Busy, but good."), ("ill", "Not so good. I have a cold."),
    ])
    turns = [(0, f"{hello}, {b}! {how}"), (1, f"{hello}, {a}! {reply} And you?")]
    back = rng.choice(["I'm good, thanks.", "I'm well, thank you.", "Pretty good!", "Not bad, thanks."])
    if mood == "ill":
        turns.append((0, f"{back} I'm sorry you have a cold. Drink lots of tea and rest."))
        turns.append((1, "Thanks, I will."))
    elif mood == "tired":
        turns.append((0, f"{back} Did you sleep badly?"))
        turns.append((1, rng.choice(["Yes, the neighbours were loud.", "Yes, I worked late.",
                                     "A little. The baby woke up twice."])))
    else:
        turns.append((0, back))
    return turns


def introduction(rng: random.Random, a: str, b: str) -> Turns:
    city = rng.choice(CITIES)
    job = rng.choice(list(JOBS))
    place, what = JOBS[job]
    turns = [(0, f"Hi, I'm {a}. Nice to meet you."),
             (1, f"Nice to meet you too, {a}. I'm {b}."),
             (0, "Where are you from?"),
             (1, f"I'm from {city}. And you?"),
             (0, f"I'm from {rng.choice(CITIES)}. What do you do?"),
             (1, f"I'm {'an' if job[0] in 'aeiou' else 'a'} {job}. I work at {place}. {what}")]
    turns.append((0, rng.choice(["That sounds interesting!", "That sounds like hard work.",
                                 "Oh, nice! Do you like it?", "Cool. How long have you done that?"])))
    if turns[-1][1].startswith("Oh"):
        turns.append((1, rng.choice(["Yes, I love it.", "Most days, yes.", "It's hard, but I like it."])))
    elif turns[-1][1].startswith("Cool"):
        turns.append((1, f"For {num(rng.randint(2, 15))} years now."))
    return turns


def weather(rng: random.Random, a: str, b: str) -> Turns:
    cond = rng.choice(list(WEATHER))
    (lo, hi), advice, feel = WEATHER[cond]
    t = rng.randint(lo, hi)
    city = rng.choice(CITIES)
    turns = [(0, rng.choice(["What's the weather like today?", "How is the weather where you are?",
                             f"What's the weather like in {city}?", "Is it nice outside?"]))]
    deg = f"{t} degree" + ("" if abs(t) == 1 else "s")
    turns.append((1, f"It's {cond} and {deg}. " + rng.choice([f"It feels {feel}.", "", f"Quite {feel}, really."]).strip()))
    turns[-1] = (1, turns[-1][1].strip())
    q = rng.choice(["What should I wear?", "Do I need a coat?", "Should I take anything?"])
    turns.append((0, q))
    turns.append((1, advice))
    if rng.random() < 0.5:
        tomorrow = rng.choice(list(WEATHER))
        turns.append((0, "And tomorrow?"))
        turns.append((1, f"Tomorrow it will be {tomorrow}, they say."))
    return turns


def season_talk(rng: random.Random, a: str, b: str) -> Turns:
    season = rng.choice(list(SEASONS))
    other = rng.choice([s for s in SEASONS if s != season])
    return [(0, "Which season do you like best?"),
            (1, f"I like {season} best. It's {SEASONS[season]}."),
            (0, f"I prefer {other}. I like it when it's {SEASONS[other]}."),
            (1, rng.choice(["Every season has something nice.", "Fair enough!", "I can understand that."]))]


def cafe_order(rng: random.Random, a: str, b: str) -> Turns:
    drink = rng.choice(DRINKS)
    food = rng.choice(FOODS)
    total = CAFE_MENU[drink] + CAFE_MENU[food]
    turns = [(1, rng.choice(["Hello! What can I get you?", "Hi there! What would you like?",
                             "Good morning! Are you ready to order?"])),
             (0, f"{rng.choice(['I would like', 'Can I have', 'I will have'])} {an(drink)} and {an(food)}, please."),
             (1, rng.choice(["Anything else?", "Would you like anything else?", "Is that all?"]))]
    turns.append((0, rng.choice(["No, that's all, thanks.", "That's all, thank you.", "No, thanks."])))
    if rng.random() < 0.5:
        item = rng.choice([drink, food])
        turns.insert(3, (0, f"How much is the {item}?"))
        turns.insert(4, (1, f"The {item} is {euros(CAFE_MENU[item])}."))
    turns.append((1, f"That's {euros(total)}, please."))
    turns.append((0, rng.choice(["Here you are.", "Here you go.", "Can I pay by card?"])))
    if turns[-1][1].startswith("Can"):
        turns.append((1, "Of course. Just tap the card here."))
    turns.append((1, rng.choice(["Thank you! Enjoy your meal.", "Thanks! Have a nice day.",
                                 "Thank you. Your order will be ready soon."])))
    return turns


def food_talk(rng: random.Random, a: str, b: str) -> Turns:
    meal = rng.choice(["breakfast", "lunch", "dinner"])
    dish, other = rng.sample(DISHES, 2)
    turns = [(0, f"What are you having for {meal}?"),
             (1, f"I think I'll make {dish}. What about you?"),
             (0, f"I'm having {other}."),
             (1, rng.choice(["That sounds good.", "Yum! Can I come over?", "Nice. I love that.",
                             "Oh, I haven't had that in a long time."]))]
    if rng.random() < 0.4:
        fav = rng.choice(DISHES)
        turns += [(0, "What is your favourite food?"), (1, f"My favourite food is {fav}.")]
    return turns


def recipe_talk(rng: random.Random, a: str, b: str) -> Turns:
    dish = rng.choice(list(RECIPES))
    ingredients, steps = RECIPES[dish]
    turns = [(0, f"How do you make {dish}?"),
             (1, f"It's easy. You need {', '.join(ingredients[:-1])} and {ingredients[-1]}.")]
    turns.append((0, "And then?"))
    turns.append((1, " ".join(steps)))
    turns.append((0, rng.choice(["Thanks, I'll try it!", "That sounds simple.", "Great, thank you."])))
    return turns


def shopping(rng: random.Random, a: str, b: str) -> Turns:
    shop = rng.choice(list(SHOPS))
    item = rng.choice(SHOPS[shop])
    turns = [(1, rng.choice(["Hello, can I help you?", "Good morning. What can I do for you?",
                             "Hi! Are you looking for anything?"]))]
    if shop == "clothes shop":
        color, size = rng.choice(COLORS), rng.choice(SIZES)
        thing = bare(item)
        turns.append((0, f"Yes, I'm looking for {item} in {color}."))
        turns.append((1, "What size do you need?"))
        turns.append((0, f"{cap(size)}, please."))
        if rng.random() < 0.7:
            price = rng.choice([15, 20, 25, 30, 40, 45, 50, 60])
            turns.append((1, f"Here is a {color} {thing} in {size}. It's {price} euros."))
            turns.append((0, rng.choice(["Can I try it on?", "I'll take it.", "Perfect, I'll take it."])))
            if turns[-1][1].startswith("Can"):
                turns.append((1, "Of course. The changing rooms are over there."))
        else:
            other = rng.choice([c for c in COLORS if c != color])
            turns.append((1, f"Sorry, we don't have it in {color}. We have it in {other}."))
            turns.append((0, rng.choice([f"Okay, I'll take the {other} one.", "No, thanks. I'll look somewhere else."])))
    else:
        qty = ""
        if shop == "market":
            qty = f"{rng.choice(['one kilo', 'two kilos', 'half a kilo', 'a bag'])} of "
        turns.append((0, f"Yes, {qty}{item}, please."))
        if rng.random() < 0.8:
            price = rng.randint(1, 9)
            turns.append((1, f"Here you are. That's {euros(price)}."))
            turns.append((0, "Thank you."))
        else:
            other = rng.choice([x for x in SHOPS[shop] if x != item])
            turns.append((1, f"Sorry, we're out of {bare(item)} today. We have {other}."))
            turns.append((0, rng.choice([f"Then I'll take {other}.", "That's okay. I'll come back tomorrow."])))
    turns.append((1, rng.choice(["Have a nice day!", "Thanks for coming!", "See you next time."])))
    return turns


def shopping_list(rng: random.Random, a: str, b: str) -> Turns:
    items = rng.sample(SHOPS["supermarket"] + FRUITS, 3)
    return [(0, "I'm going to the shop. Do we need anything?"),
            (1, f"Yes, we need {items[0]}, {items[1]} and {items[2]}."),
            (0, rng.choice(["Anything else?", "Is that all?"])),
            (1, rng.choice(["No, that's all.", f"Maybe some {rng.choice(FRUITS)} too.", "I think that's it."])),
            (0, "Okay, see you later.")]


def train_ticket(rng: random.Random, a: str, b: str) -> Turns:
    src, dst = rng.sample(CITIES, 2)
    when = clock(rng, 6, 22)
    plat = rng.randint(1, 12)
    price = rng.choice([20, 25, 30, 35, 40, 45, 50, 55, 60, 70, 80])
    kind = rng.choice(["a single", "a return"])
    turns = [(0, f"Hello. I'd like {kind} ticket to {dst}, please."),
             (1, rng.choice(["For today?", "When do you want to travel?"])),
             (0, rng.choice(["Yes, today.", "Today, please. As soon as possible."])),
             (1, f"The next train to {dst} leaves at {when} from platform {plat}. It's {price} euros."),
             (0, rng.choice(["Great. Here you are.", "Okay. Can I pay by card?", "Fine. How long does it take?"]))]
    if "card" in turns[-1][1]:
        turns.append((1, "Yes, of course."))
    elif "long" in turns[-1][1]:
        turns.append((1, f"About {num(rng.randint(1, 6))} hours."))
    turns.append((1, f"Here is your ticket. Platform {plat}, at {when}. Have a good trip!"))
    turns.append((0, "Thank you!"))
    return turns


def directions(rng: random.Random, a: str, b: str) -> Turns:
    place = rng.choice(PLACES)
    steps = rng.sample(DIRECTIONS, 2)
    mins = rng.randint(2, 15)
    turns = [(0, f"Excuse me, how do I get to {place}?"),
             (1, f"{cap(steps[0])}, then {steps[1]}. {cap(place)} is on your {rng.choice(['left', 'right'])}."),
             (0, "Is it far?"),
             (1, f"No, it's about {num(mins)} minutes on foot." if mins <= 20 else "Yes, take a bus."),
             (0, rng.choice(["Thank you very much!", "Thanks a lot!", "Great, thanks."])),
             (1, rng.choice(["You're welcome.", "No problem.", "Have a nice day!"]))]
    return turns


def hotel(rng: random.Random, a: str, b: str) -> Turns:
    nights = rng.randint(1, 7)
    room = rng.randint(101, 420)
    breakfast = rng.choice(["7:00", "7:30", "8:00"])
    turns = [(1, "Good evening. Welcome to the hotel."),
             (0, f"Hello. I have a booking for {num(nights)} night{'s' if nights > 1 else ''}. My name is {a}."),
             (1, f"Yes, here it is. Your room is number {room}, on floor {str(room)[0]}."),
             (0, "What time is breakfast?"),
             (1, f"Breakfast is from {breakfast} to 10:00 in the dining room."),
             (0, rng.choice(["Is there wifi?", "Where is the lift?", "Thank you."]))]
    answer = {"Is there wifi?": "Yes, it's free. The password is on your key card.",
              "Where is the lift?": "The lift is on the right, next to the stairs."}.get(turns[-1][1], "You're welcome.")
    return turns + [(1, f"{answer} Enjoy your stay!")]


def travel_talk(rng: random.Random, a: str, b: str) -> Turns:
    city, country = rng.choice(CAPITALS)
    how = rng.choice(["by train", "by plane", "by car", "by bus", "by boat"])
    days = rng.randint(2, 14)
    turns = [(0, "Are you going anywhere this summer?" if rng.random() < 0.5 else "Where are you going on holiday?"),
             (1, f"I'm going to {city}, in {country}."),
             (0, "How are you getting there?"),
             (1, f"{cap(how)}. I'll stay for {num(days)} days."),
             (0, rng.choice([f"Have you been to {country} before?", "What will you do there?", "Lucky you!"]))]
    if "before" in turns[-1][1]:
        turns.append((1, rng.choice(["No, it's my first time.", "Yes, once, a long time ago."])))
    elif "What" in turns[-1][1]:
        turns.append((1, rng.choice(["Visit museums and eat good food.", "Walk around the city and relax.",
                                     "See friends and go to the beach."])))
    return turns


def work_talk(rng: random.Random, a: str, b: str) -> Turns:
    thing = rng.choice(WORK_THINGS)
    day = rng.choice(DAYS[:5])
    time = clock(rng, 9, 17)
    turns = [*rng.choice([[(0, f"Did you finish {thing}?"),
                           (1, rng.choice(["Yes, I sent it this morning.", "Not yet. I had too many meetings."]))],
                          [(0, f"How is {thing} going?"),
                           (1, rng.choice(["Almost done. I need one more hour.", "Slowly. I had too many meetings."]))]]),
             (0, f"We have a meeting on {day} at {time}. Can you come?"),
             (1, rng.choice([f"Yes, {day} at {time} is fine.", f"Sorry, I'm busy on {day}. What about the next day?"]))]
    if "Sorry" in turns[-1][1]:
        nxt = DAYS[(DAYS.index(day) + 1) % 7]
        turns.append((0, f"Okay, let's meet on {nxt} at {time} then."))
    turns.append((0 if turns[-1][0] == 1 else 1, rng.choice(["See you then.", "Great, see you there.", "Perfect."])))
    return turns


def job_talk(rng: random.Random, a: str, b: str) -> Turns:
    job = rng.choice(list(JOBS))
    place, what = JOBS[job]
    art = "an" if job[0] in "aeiou" else "a"
    return [(0, "What do you do for work?"),
            (1, f"I'm {art} {job}."),
            (0, f"Where do you work?"),
            (1, f"At {place}. {what}"),
            *rng.choice([[(0, "Do you like your job?"), (1, rng.choice(["Yes, very much.", "Most days, yes."]))],
                         [(0, "Is it hard?"), (1, rng.choice(["Sometimes, but I like it.", "Not really."]))],
                         [(0, "What time do you start?"), (1, f"I start at {clock(rng, 6, 9)}.")]])]


def hobby_talk(rng: random.Random, a: str, b: str) -> Turns:
    hobby = rng.choice(list(HOBBIES))
    place, need = HOBBIES[hobby]
    day = rng.choice(DAYS)
    turns = [(0, "What do you like to do in your free time?"),
             (1, f"I like to {hobby}. I usually do it {place}."),
             (0, rng.choice(["How often?", "Since when?", "What do you need for that?"]))]
    q = turns[-1][1]
    if q == "How often?":
        turns.append((1, rng.choice(["Every weekend.", f"Every {day}.", "Twice a week.", "Almost every day."])))
    elif q == "Since when?":
        turns.append((1, f"Since I was {num(rng.randint(5, 20))}."))
    else:
        turns.append((1, f"Just {need}."))
    if rng.random() < 0.5:
        time = clock(rng, 9, 19)
        turns += [(1, f"Do you want to join me on {day}?"),
                  (0, rng.choice([f"I'd love to! What time?", "Sorry, I can't this week."]))]
        if "love" in turns[-1][1]:
            turns += [(1, f"At {time}."), (0, f"Great, see you on {day} at {time}.")]
    return turns


def time_talk(rng: random.Random, a: str, b: str) -> Turns:
    kind = rng.random()
    if kind < 0.35:
        h = rng.randint(1, 12)
        m = rng.choice([("o'clock", 0), ("half past", 30), ("quarter past", 15), ("quarter to", 45)])
        if m[1] == 0:
            said = f"It's {num(h)} o'clock."
        elif m[1] == 45:
            said = f"It's quarter to {num(h % 12 + 1)}."
        else:
            said = f"It's {m[0]} {num(h)}."
        return [(0, rng.choice(["Excuse me, what time is it?", "Do you know what time it is?"])),
                (1, said), (0, "Thank you.")]
    if kind < 0.7:
        i = rng.randrange(7)
        return [(0, "What day is it today?"), (1, f"It's {DAYS[i]}."),
                (0, f"So tomorrow is {DAYS[(i + 1) % 7]}."),
                (1, rng.choice(["Yes, that's right.", "Exactly."]))]
    m = rng.randrange(12)
    d = rng.randint(1, 28)
    return [(0, "When is your birthday?"), (1, f"It's on the {ordinal(d)} of {MONTHS[m]}. And yours?"),
            (0, f"Mine is in {rng.choice(MONTHS)}.")]


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def quiz(rng: random.Random, a: str, b: str) -> Turns:
    """Simple questions with fixed answers (facts the model can learn)."""
    q, ans = fact_qa(rng)
    turns = [(0, q), (1, ans)]
    if rng.random() < 0.3:
        q2, ans2 = fact_qa(rng)
        turns += [(0, rng.choice(["And ", "Okay. ", ""]) + q2), (1, ans2)]
    return turns


def fact_qa(rng: random.Random) -> tuple[str, str]:
    kind = rng.randrange(8)
    if kind == 0:
        thing = rng.choice(list(COLOR_OF))
        return f"What color is {thing}?", f"{cap(thing)} is {COLOR_OF[thing]}."
    if kind == 1:
        animal = rng.choice(list(ANIMAL_SOUND))
        return f"What sound does {animal} make?", f"{cap(animal)} {ANIMAL_SOUND[animal]}."
    if kind == 2:
        animal = rng.choice(list(ANIMAL_LEGS))
        n = ANIMAL_LEGS[animal]
        return f"How many legs does {animal} have?", (f"{cap(animal)} has no legs." if n == 0
                                                     else f"{cap(animal)} has {num(n)} legs.")
    if kind == 3:
        w = rng.choice(list(OPPOSITES))
        return f"What is the opposite of {w}?", f"The opposite of {w} is {OPPOSITES[w]}."
    if kind == 4:
        x, y = rng.randint(0, 10), rng.randint(0, 10)
        return f"What is {num(x)} plus {num(y)}?", f"{cap(num(x))} plus {num(y)} is {num(x + y)}."
    if kind == 5:
        city, country = rng.choice(QUIZ_CAPITALS)
        return f"What is the capital of {country}?", f"The capital of {country} is {city}."
    if kind == 6:
        what, where = rng.choice(list(COUNTS))
        n = COUNTS[what, where]
        return f"How many {what} are there {where}?", f"There are {num(n)} {what} {where}."
    i = rng.randrange(7)
    return f"What day comes after {DAYS[i]}?", f"{DAYS[(i + 1) % 7]} comes after {DAYS[i]}."


def word_meaning(rng: random.Random, a: str, b: str) -> Turns:
    word = rng.choice(list(MEANINGS))
    turns = [(0, f"What does {word} mean?"), (1, f"{cap(word)} means {MEANINGS[word]}.")]
    if rng.random() < 0.4:
        word = rng.choice(list(MEANINGS))
        turns += [(0, f"And {word}?"), (1, f"{cap(word)} means {MEANINGS[word]}.")]
    return turns


def goodbye(rng: random.Random, a: str, b: str) -> Turns:
    return [(0, rng.choice(["I have to go now.", "Well, I should get going.", "Sorry, I need to run."])),
            (1, rng.choice([f"Okay, bye {a}!", "See you soon!", "Take care!", "Bye! Have a good day."])),
            (0, rng.choice(["Bye!", "See you!", f"Bye {b}!"]))]


def thanks(rng: random.Random, a: str, b: str) -> Turns:
    favour = rng.choice(["helping me move", "the lovely dinner", "the book", "your help yesterday",
                         "the flowers", "picking me up"])
    return [(0, f"Thank you for {favour}."),
            (1, rng.choice(["You're welcome!", "No problem at all.", "Any time!", "My pleasure."]))]


def family_talk(rng: random.Random, a: str, b: str) -> Turns:
    rel = rng.choice(FAMILY)
    job = rng.choice(list(JOBS))
    art = "an" if job[0] in "aeiou" else "a"
    n = rng.randint(1, 4)
    turns = [(0, "Do you have a big family?"),
             (1, rng.choice([f"Not really. Just my parents and my {rel}.", f"Yes! I have {num(n)} cousins.",
                             f"Quite big. I have a {rel} and {num(n)} cousins."])),
             (0, f"What does your {rel} do?"),
             (1, f"My {rel} is {art} {job}. {rng.choice(['We are very close.', 'I see them every week.', 'They live far away.'])}")]
    if rng.random() < 0.5:
        age = rng.randint(3, 80)
        turns += [(0, f"How old is your {rel}?"), (1, f"{cap(num(age)) if age <= 20 else age}.")]
    return turns


def pet_talk(rng: random.Random, a: str, b: str) -> Turns:
    pet = rng.choice(list(PETS))
    name = rng.choice(PET_NAMES)
    age = rng.randint(1, 12)
    art = "an" if pet[0] in "aeiou" else "a"
    return [(0, "Do you have any pets?"),
            (1, f"Yes, I have {art} {pet} called {name}."),
            *rng.choice([[(0, f"How old is {name}?"), (1, f"{name} is {num(age)}.")],
                         [(0, f"What does {name} eat?"), (1, f"{cap(PETS[pet])}.")],
                         [(0, f"Is {name} friendly?"), (1, rng.choice(["Very friendly, and a bit lazy.", "Only with me."]))]]),
            (0, rng.choice(["I would love a pet.", f"{name} sounds sweet!", "Can I meet them one day?"]))]


def home_talk(rng: random.Random, a: str, b: str) -> Turns:
    rooms = rng.randint(1, 5)
    room = rng.choice(ROOMS)
    adj1, adj2 = rng.sample(ROOM_ADJECTIVES, 2)
    want = rng.choice(FURNITURE)
    return [(0, rng.choice(["I heard you moved. How is the new flat?", "How do you like your new place?"])),
            (1, f"I love it. It has {num(rooms)} room{'s' if rooms > 1 else ''} and a small {rng.choice(['balcony', 'garden'])}."),
            (0, "What is your favourite room?"),
            (1, f"The {room}. It's {adj1} and {adj2}."),
            (0, "Do you need anything for it?"),
            (1, f"Yes, a new {want}. {rng.choice(['The old one is broken.', 'I have nothing yet.', 'Maybe from the market.'])}")]


def doctor_visit(rng: random.Random, a: str, b: str) -> Turns:
    symptom = rng.choice(list(SYMPTOMS))
    days = rng.randint(1, 5)
    turns = [(1, rng.choice(["Hello, what seems to be the problem?", "Good morning. How can I help you?"])),
             (0, f"I have {symptom}."),
             (1, "How long have you had it?"),
             (0, f"For {num(days)} day{'s' if days > 1 else ''}."),
             (1, SYMPTOMS[symptom]),
             (0, rng.choice(["Thank you, doctor.", "Okay, I'll do that.", "Thanks. I hope it helps."]))]
    return turns


def weekend_talk(rng: random.Random, a: str, b: str) -> Turns:
    act1, act2 = rng.sample(PAST_ACTIVITIES, 2)
    feel = rng.choice(FEELINGS)
    return [(0, rng.choice(["What did you do at the weekend?", "How was your weekend?", "Did you do anything nice yesterday?"])),
            (1, f"It was {feel}. I {act1} and {act2}. What about you?"),
            (0, f"I {rng.choice(PAST_ACTIVITIES)}."),
            (1, rng.choice(["Sounds nice!", "That sounds lovely.", "Oh, I should do that too.", "Nice!"]))]


def study_talk(rng: random.Random, a: str, b: str) -> Turns:
    subj, other = rng.sample(SUBJECTS, 2)
    year = rng.randint(1, 4)
    return [(0, "What are you studying?"),
            (1, f"I'm studying {subj}. I'm in my {['first', 'second', 'third', 'fourth'][year - 1]} year."),
            (0, "Do you like it?"),
            (1, rng.choice([f"Yes, a lot. But I find {other} hard.", "Yes, the teachers are great.",
                            "Most of the time. The exams are hard."])),
            *rng.choice([[(0, "When are your exams?"), (1, rng.choice([f"In {rng.choice(MONTHS)}.", f"Next {rng.choice(DAYS)}."]))],
                         [(0, "Good luck with it!"), (1, "Thanks!")]])]


def film_talk(rng: random.Random, a: str, b: str) -> Turns:
    genre = rng.choice(list(GENRES))
    day = rng.choice(DAYS)
    time = clock(rng, 17, 21)
    turns = [(0, f"Did you see the new {genre}?"),
             (1, rng.choice([f"Yes! It was really {GENRES[genre]}.", "No, not yet. Is it good?"]))]
    if turns[-1][1].startswith("No"):
        turns.append((0, f"Yes, it's very {GENRES[genre]}. Do you want to go on {day}?"))
        turns.append((1, rng.choice([f"Sure! The film starts at {time}.", "I'd love to."])))
    else:
        turns.append((0, rng.choice(["I want to see it too.", "Who did you go with?"])))
        if turns[-1][1].startswith("Who"):
            turns.append((1, f"With my {rng.choice(FAMILY)}."))
    return turns


def appointment_call(rng: random.Random, a: str, b: str) -> Turns:
    place = rng.choice(list(APPOINTMENTS))
    day = rng.choice(DAYS[:6])
    time = clock(rng, 8, 17)
    return [(1, f"Hello, this is {place}. How can I help you?"),
            (0, f"Hello, my name is {a}. I'd like to book {APPOINTMENTS[place]}."),
            (1, f"Of course. Is {day} at {time} okay?"),
            *rng.choice([[(0, f"Yes, {day} at {time} is perfect."), (1, "Great, see you then.")],
                         [(0, "Do you have anything earlier?"),
                          (1, f"Yes, {DAYS[(DAYS.index(day) + 6) % 7]} at {time}. See you then.")]])]


def gift_talk(rng: random.Random, a: str, b: str) -> Turns:
    friend = rng.choice(NAMES)
    day = rng.choice(DAYS)
    g1, g2 = rng.sample(GIFTS, 2)
    return [(0, f"It's {friend}'s birthday on {day}. What should we buy?"),
            (1, f"How about {g1}?"),
            *rng.choice([[(0, f"Good idea. Or {g2}?"), (1, "Both are nice. Let's go to the shops tomorrow.")],
                         [(0, "They already have that."), (1, f"Let's get {g2} then.")],
                         [(0, f"Perfect, let's buy {g1}."), (1, "Great, I'll get it.")]])]


def bus_talk(rng: random.Random, a: str, b: str) -> Turns:
    place = rng.choice(BUS_PLACES)
    n = rng.randint(1, 99)
    if rng.random() < 0.5:
        return [(0, f"Excuse me, does this bus go to {place}?"), (1, "Yes, it does. It's the fifth stop."),
                (0, "Great, thank you.")]
    return [(0, f"Excuse me, does this bus go to {place}?"),
            (1, f"No, sorry. You need the number {n}. It stops over there."), (0, "Thank you!")]


def compliment(rng: random.Random, a: str, b: str) -> Turns:
    thing = rng.choice(CLOTHES)
    color = rng.choice(COLORS)
    return [(0, f"I like your {color} {thing}!"),
            (1, f"Thanks! I got it {rng.choice(['at the market', 'in a small shop', 'as a present', 'online', 'in the sale'])}."),
            (0, rng.choice(["It suits you.", "It looks great.", "I need one like that."]))]


def describe_person(rng: random.Random, a: str, b: str) -> Turns:
    friend = rng.choice(NAMES)
    adj1, adj2 = rng.sample(PERSON_ADJECTIVES, 2)
    return [(0, f"What is {friend} like?"),
            (1, f"{friend} is {adj1} and {adj2}."),
            (0, rng.choice(["Really? I didn't know that.", "That's what I thought.", "I'd like to meet them."]))]


def news_talk(rng: random.Random, a: str, b: str) -> Turns:
    place = rng.choice(NEW_PLACES)
    street = rng.choice(STREETS)
    day = rng.choice(DAYS)
    art = "an" if place[0] in "aeiou" else "a"
    return [(0, f"Did you hear? There's a new {place} on {street}."),
            *rng.choice([[(1, "Really? Since when?"), (0, f"It opened last {day}.")],
                         [(1, "Oh, nice! Have you been there?"), (0, f"Yes, I went on {day}. It's great.")]]),
            (1, rng.choice([f"Let's go together some time.", f"We really needed {art} {place}."]))]


def lost_item(rng: random.Random, a: str, b: str) -> Turns:
    thing = rng.choice(LOST_THINGS)
    place = rng.choice(FOUND_PLACES)
    are = "are" if thing.endswith("s") else "is"
    it = "them" if thing.endswith("s") else "it"
    return [(0, f"Have you seen my {thing}? I can't find {it} anywhere."),
            (1, f"Did you look {place}?"),
            *rng.choice([[(0, "Yes, it's not there." if it == "it" else "Yes, they're not there."),
                          (1, f"Then try {rng.choice(FOUND_PLACES)}.")],
                         [(0, f"Oh, here {it} {are}! Thanks."), (1, rng.choice(["Good!", "No problem."]))]])]


def language_talk(rng: random.Random, a: str, b: str) -> Turns:
    lang, other = rng.sample(LANGUAGES, 2)
    years = rng.randint(1, 10)
    return [(0, f"Do you speak {lang}?"),
            (1, rng.choice([f"Yes, a little. I learned it at school.", f"No, but I speak {other}.",
                            f"Yes, I've been learning it for {num(years)} years."])),
            (0, rng.choice(["Is it hard?", "That's great.", f"I'd like to learn {other} one day."])),
            (1, rng.choice(["The grammar is hard, but it's fun.", "Practice every day, that helps.", "Thanks!"]))]


def sport_talk(rng: random.Random, a: str, b: str) -> Turns:
    sport = rng.choice(SPORTS)
    city1, city2 = rng.sample(CITIES, 2)
    x, y = rng.randint(0, 4), rng.randint(0, 4)
    if rng.random() < 0.5:
        return [(0, "Did you watch the match last night?"),
                (1, f"Yes! {city1} played {city2}. It was {num(x)} to {num(y)}."),
                (0, rng.choice(["What a game!", "I missed it. Was it exciting?", "I fell asleep before the end."]))]
    return [(0, "Do you do any sport?"),
            (1, f"Yes, I do {sport} twice a week." if sport not in ("football", "basketball", "volleyball",
                "golf", "badminton", "table tennis", "handball", "hockey") else f"Yes, I play {sport} on {rng.choice(DAYS)}s."),
            (0, rng.choice(["That keeps you fit!", "I should start too.", f"I used to play {rng.choice(SPORTS)}."]))]


def chores_talk(rng: random.Random, a: str, b: str) -> Turns:
    c1, c2 = rng.sample(CHORES, 2)
    return [(0, f"Can you {c1}, please?"),
            (1, rng.choice([f"Sure. Can you {c2}?", "In a minute, I'm busy.", f"I did it yesterday. Can you {c2}?"])),
            (0, rng.choice(["Okay, fair enough.", "Fine, I'll do it now.", "Thanks!"]))]


def born_talk(rng: random.Random, a: str, b: str) -> Turns:
    year = rng.randint(1940, 2015)
    city = rng.choice(CITIES)
    return [(0, "Where were you born?"), (1, f"In {city}, in {year}."),
            (0, rng.choice([f"I've never been to {city}.", f"Oh, I was born in {rng.randint(1940, 2015)}.",
                            f"Do you still live in {city}?"]))]


def restaurant_booking(rng: random.Random, a: str, b: str) -> Turns:
    people = rng.randint(2, 8)
    day = rng.choice(DAYS)
    time = clock(rng, 18, 21)
    turns = [(1, "Good afternoon, how can I help?"),
            (0, f"I'd like to book a table for {num(people)} on {day} at {time}."),
            (1, rng.choice(["Yes, that's fine. What name is it?", f"Sorry, we're full at {time}. Is later okay?"])),
            ]
    if "name" in turns[-1][1]:
        turns.append((0, rng.choice([f"It's {a}.", f"The name is {a}."])))
    else:
        turns += [(0, "Yes, later is fine."), (1, f"Then {int(time.split(':')[0]) + 1}:{time.split(':')[1]}. What name is it?"),
                  (0, f"It's {a}.")]
    return turns + [(1, f"Thank you. See you on {day}.")]


TOPICS = [  # (function, weight)
    (introduction, 3), (weather, 5), (season_talk, 1), (cafe_order, 5), (food_talk, 3), (recipe_talk, 2),
    (shopping, 5), (shopping_list, 2), (train_ticket, 3), (directions, 3), (hotel, 2), (travel_talk, 3),
    (work_talk, 3), (job_talk, 3), (hobby_talk, 4), (time_talk, 3), (quiz, 8), (thanks, 1),
    (family_talk, 2), (pet_talk, 2), (home_talk, 2), (doctor_visit, 2), (weekend_talk, 3), (study_talk, 2),
    (film_talk, 2), (appointment_call, 2), (gift_talk, 2), (bus_talk, 2), (compliment, 1),
    (describe_person, 2), (news_talk, 2), (lost_item, 2), (language_talk, 2), (sport_talk, 2), (chores_talk, 2),
    (born_talk, 1), (restaurant_booking, 2), (word_meaning, 3),
]
# topics that are conversations between friends (may open with a greeting and close with a goodbye)
FRIENDLY = {weather, season_talk, food_talk, recipe_talk, shopping_list, travel_talk, work_talk, job_talk,
            hobby_talk, time_talk, quiz, thanks, family_talk, pet_talk, home_talk, weekend_talk, study_talk,
            film_talk, gift_talk, compliment, describe_person, news_talk, lost_item, language_talk, sport_talk,
            chores_talk, born_talk, word_meaning}


def dialogue(rng: random.Random) -> str:
    a, b = rng.sample(NAMES, 2)
    topics = rng.choices([t for t, _ in TOPICS], weights=[w for _, w in TOPICS])
    if topics[0] in FRIENDLY and rng.random() < 0.35:  # friends talk about a second thing
        friendly = [(t, w) for t, w in TOPICS if t in FRIENDLY and t is not topics[0]]
        topics += rng.choices([t for t, _ in friendly], weights=[w for _, w in friendly])
    turns: Turns = []
    if topics[0] in FRIENDLY and rng.random() < 0.5:
        turns += greeting(rng, a, b)
    for topic in topics:
        turns += topic(rng, a, b)
    if topics[-1] in FRIENDLY and rng.random() < 0.4:
        turns += goodbye(rng, a, b)
    names = (a, b)
    roles = None
    if topics == [cafe_order]:
        roles = ("Guest", "Waiter")
    elif topics == [shopping]:
        roles = ("Customer", "Shop assistant")
    elif topics == [hotel]:
        roles = ("Guest", "Receptionist")
    elif topics == [doctor_visit]:
        roles = ("Patient", "Doctor")
    if roles and rng.random() < 0.5:
        names = roles
    merged: Turns = []  # one line per turn: join consecutive sentences of the same speaker
    for s, t in turns:
        if merged and merged[-1][0] == s:
            merged[-1] = (s, f"{merged[-1][1]} {t}")
        else:
            merged.append((s, t))
    return "\n".join(f"{names[s]}: {t}" for s, t in merged)


# ---------------------------------------------------------------------------------------------
# Chat (user / assistant) conversations for fine-tuning
# ---------------------------------------------------------------------------------------------
def chat_exchange(rng: random.Random) -> tuple[str, str]:
    kind = rng.choices(range(13), weights=[2, 3, 2, 2, 2, 2, 2, 2, 5, 1, 2, 1, 2])[0]
    if kind == 12:
        word = rng.choice(list(MEANINGS))
        return rng.choice([f"What does {word} mean?", f"What is the meaning of {word}?"]), f"{cap(word)} means {MEANINGS[word]}."
    if kind == 10:
        symptom = rng.choice(list(SYMPTOMS))
        return rng.choice([f"I have {symptom}. What should I do?", f"What helps with {symptom}?"]), SYMPTOMS[symptom]
    if kind == 11:
        rel = rng.choice(FAMILY)
        g1, g2 = rng.sample(GIFTS, 2)
        return f"What can I give my {rel} for their birthday?", f"How about {g1} or {g2}?"
    if kind == 0:
        return (rng.choice(["Hi!", "Hello!", "Hey there!", "Good morning!", "Hello, who are you?"]),
                rng.choice(["Hello! How can I help you today?", "Hi! What can I do for you?",
                            "Hello! I'm a small assistant. Ask me anything simple."]))
    if kind == 1:
        cond = rng.choice(list(WEATHER))
        (lo, hi), advice, _ = WEATHER[cond]
        t = rng.randint(lo, hi)
        return (rng.choice([f"It's {cond} today. What should I wear?", f"The weather is {cond}. Any advice?",
                            f"It is {cond} and {t} degrees outside. What should I take?"]), advice)
    if kind == 2:
        dish = rng.choice(list(RECIPES))
        ingredients, steps = RECIPES[dish]
        return (f"How do I make {dish}?",
                f"You need {', '.join(ingredients[:-1])} and {ingredients[-1]}. " + " ".join(steps))
    if kind == 3:
        item = rng.choice(list(CAFE_MENU))
        return (rng.choice([f"How much is the {item} at the cafe?", f"What does a {item} cost?"]),
                f"The {item} is {euros(CAFE_MENU[item])}.")
    if kind == 4:
        job = rng.choice(list(JOBS))
        place, what = JOBS[job]
        art = "an" if job[0] in "aeiou" else "a"
        return (f"What does {art} {job} do?", f"{cap(art)} {job} works at {place}. " +
                what.replace("I ", "They ").replace("my ", "their "))
    if kind == 5:
        hobby = rng.choice(list(HOBBIES))
        place, need = HOBBIES[hobby]
        return (rng.choice([f"I want to {hobby}. What do I need?", f"What do I need to {hobby}?"]),
                f"You need {need}. Many people do it {place.replace('my ', 'your ')}.")
    if kind == 6:
        mood = rng.choice(["bored", "tired", "sad", "hungry", "stressed"])
        tip = {"bored": "Why not read a book or go for a walk?",
               "tired": "Try to go to bed early tonight and drink some water.",
               "sad": "I'm sorry to hear that. Talking to a friend often helps.",
               "hungry": f"How about some {rng.choice(DISHES)}?",
               "stressed": "Take a deep breath and make a short list of what to do first."}[mood]
        return f"I feel {mood}.", tip
    if kind == 7:
        src, dst = rng.sample(CITIES, 2)
        how = rng.choice(["train", "bus", "plane"])
        return (f"I'm travelling from {src} to {dst} by {how}. Any tips?",
                rng.choice([f"Book your {how} ticket early and arrive a little before it leaves.",
                            f"Take a snack and some water, and check the {how} times the day before.",
                            f"Have a good trip to {dst}! Keep your ticket somewhere easy to find."]))
    if kind == 8:
        return fact_qa(rng)
    return (rng.choice(["Thank you!", "Thanks a lot.", "Great, thanks!"]),
            rng.choice(["You're welcome!", "Happy to help.", "Any time!"]))


def chat_conversation(rng: random.Random) -> list[dict]:
    messages = []
    for _ in range(rng.choice([1, 1, 2, 2, 3])):
        user, assistant = chat_exchange(rng)
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    return messages


# ---------------------------------------------------------------------------------------------
DIALOGUE_KB, CHAT_KB = 395, 95  # the shipped sizes


def make(seed: int, dialogue_bytes: int, chat_bytes: int) -> tuple[str, str]:
    rng = random.Random(seed)
    parts, size = [], 0
    while size < dialogue_bytes:
        d = dialogue(rng) + "\n\n"
        parts.append(d)
        size += len(d.encode())
    text = "".join(parts)
    rng = random.Random(seed + 1)
    lines, size = [], 0
    while size < chat_bytes:
        line = json.dumps({"messages": chat_conversation(rng)}, ensure_ascii=False) + "\n"
        lines.append(line)
        size += len(line.encode())
    return text, "".join(lines)


README = """# tinylm's shipped corpus

Generated, not collected: `python tools/make_corpus.py --seed {seed}` writes these files from the
templates and word lists in that script (no download, no outside text, no personal data). The same seed
gives byte-identical files. Regenerate after editing the script and commit the script and the data together.

| file | what | size |
|---|---|---|
| `dialogues.txt` | {n_dialogues:,} short everyday dialogues (greetings, weather, café, shopping, travel, work, hobbies, time, simple facts); `Name: text` lines, a blank line between dialogues; for pretraining | {dialogue_kb:.0f} KB |
| `chat.jsonl` | {n_chats:,} user/assistant conversations, one JSON object per line: `{{"messages": [{{"role": "user", "content": ...}}, {{"role": "assistant", "content": ...}}, ...]}}`; for chat fine-tuning | {chat_kb:.0f} KB |

Distinct words (case-folded, letters only): {n_words:,} in `dialogues.txt`, {n_words_all:,} in both files.
Facts are fixed (café prices, jobs, capitals, animal sounds, small sums), so a small model can learn them.
The word lists are sized so that byte-level BPE on `dialogues.txt` finds enough pairs for the mini
companion's 4,096 ids (3,836 merges); `tests/test_tokenizer.py` checks this and that the files match the script.
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tinylm" / "data"),
                   help="output folder (default tinylm/data)")
    p.add_argument("--dialogue-kb", type=int, default=DIALOGUE_KB, help=f"size of dialogues.txt in KB (default {DIALOGUE_KB})")
    p.add_argument("--chat-kb", type=int, default=CHAT_KB, help=f"size of chat.jsonl in KB (default {CHAT_KB})")
    args = p.parse_args()
    text, chat = make(args.seed, args.dialogue_kb * 1000, args.chat_kb * 1000)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "dialogues.txt").write_text(text, encoding="utf-8")
    (out / "chat.jsonl").write_text(chat, encoding="utf-8")
    words = set(re.findall(r"[a-z]+", text.lower()))
    chat_text = " ".join(m["content"] for line in chat.splitlines() for m in json.loads(line)["messages"])
    words_all = words | set(re.findall(r"[a-z]+", chat_text.lower()))
    (out / "README.md").write_text(README.format(
        seed=args.seed, n_dialogues=text.count("\n\n"), dialogue_kb=len(text.encode()) / 1000,
        n_chats=len(chat.splitlines()), chat_kb=len(chat.encode()) / 1000, n_words=len(words),
        n_words_all=len(words_all)), encoding="utf-8")
    print(f"wrote {out}/dialogues.txt ({len(text.encode()):,} bytes), chat.jsonl ({len(chat.encode()):,} bytes); "
          f"{len(words_all):,} distinct words")


if __name__ == "__main__":
    main()
