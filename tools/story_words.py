"""Word lists and prompt templates for tools/make_stories.py: simple, concrete, child-friendly words.

Each list is a few hundred words (stories) or topics (chat questions); a prompt combines a random
template with random words, as in TinyStories (Eldan & Li, 2023). Nouns are bare: the tool adds "a"/"an".
"""

from __future__ import annotations


def _words(text: str) -> list[str]:
    """One entry per line or per comma, each once: 'ball, kite\\nred apple' -> ['ball', 'kite', 'red apple']."""
    return list(dict.fromkeys(w.strip() for line in text.strip().splitlines() for w in line.split(",") if w.strip()))


NOUNS = _words("""
ball, kite, balloon, teddy bear, doll, toy car, toy train, drum, whistle, puzzle, block, robot, spinning top
box, basket, bucket, shovel, bag, backpack, hat, scarf, mitten, boot, shoe, sock, coat, umbrella, raincoat
cup, spoon, bowl, plate, pot, pan, jar, bottle, lunchbox, picnic blanket, pillow, blanket, bed, chair, table
lamp, clock, key, door, window, mirror, rug, sofa, box of crayons, crayon, pencil, paintbrush, book, map
letter, card, present, ribbon, button, bell, flag, rope, ladder, wagon, bike, scooter, sled, boat, raft
train, bus, truck, tractor, airplane, rocket, car, fire truck, little boat, paper boat, paper plane
apple, banana, orange, pear, plum, cherry, strawberry, grape, carrot, potato, tomato, pumpkin, cookie, cake
pie, sandwich, muffin, pancake, cupcake, candy, ice cream, honey, bread, cheese, egg, soup, lemon, peach
flower, rose, daisy, sunflower, tulip, leaf, tree, seed, acorn, pinecone, mushroom, stick, stone, pebble
rock, shell, feather, puddle, cloud, rainbow, star, moon, sun, snowflake, snowman, sandcastle, nest, egg shell
cat, kitten, dog, puppy, bunny, rabbit, mouse, bird, duck, duckling, hen, chick, cow, calf, pig, piglet
horse, pony, sheep, lamb, goat, frog, toad, turtle, fish, goldfish, snail, ladybug, butterfly, bee, ant
caterpillar, spider, owl, fox, bear, bear cub, deer, squirrel, hedgehog, raccoon, beaver, wolf, lion
tiger, elephant, giraffe, zebra, monkey, hippo, crocodile, penguin, seal, whale, dolphin, octopus, crab
parrot, peacock, swan, goose, crow, robin, bat, dragon, unicorn, dinosaur, fairy, giant, king, queen
prince, princess, pirate, wizard, knight, clown, farmer, baker, teacher, doctor, nurse, firefighter
mail carrier, grandma, grandpa, aunt, uncle, baby, little sister, little brother, best friend, neighbor
treasure, treasure chest, magic wand, crown, castle, tower, bridge, tent, house, hut, barn, shed, fence
gate, garden, swing, slide, sandbox, pond, river, hill, cave, island, wheel, drumstick, trumpet, guitar
piano, song, dance, story, secret, wish, dream, gift, surprise, party, picnic, race, game, hug, smile
bubble, soap, bath, towel, toothbrush, comb, necklace, ring, glasses, watch, camera, flashlight, candle
jam, juice, milk, tea, water bottle, watering can, seed packet, pot of flowers, bird feeder, kite string
marble, yo-yo, jump rope, hula hoop, sticker, stamp, postcard, envelope, note, drawing, painting, mask
cape, wand, broom, mop, sponge, pail, fishing rod, net, lantern, compass, telescope, globe, snow globe
""")

VERBS = _words("""
play, jump, run, hop, skip, dance, sing, laugh, smile, share, help, hug, wave, clap, climb, swim, fly
float, sail, row, paddle, ride, race, chase, catch, throw, kick, roll, bounce, spin, slide, swing, dig
plant, grow, water, pick, bake, cook, stir, taste, eat, drink, cut, fold, draw, paint, color, build
stack, fix, mend, sew, knit, wash, clean, sweep, tidy, pack, carry, lift, push, pull, open, close, lock
hide, seek, find, look, watch, listen, whisper, shout, call, count, read, write, spell, learn, teach, try
wait, rest, sleep, nap, wake, dream, wish, hope, share, give, lend, borrow, trade, buy, sell, visit
explore, wander, travel, march, tiptoe, crawl, wiggle, stretch, shake, nod, blink, sniff, splash, drip
pour, fill, empty, mix, melt, freeze, shine, glow, sparkle, ring, knock, tap, drum, whistle, hum, rhyme
pretend, imagine, invent, discover, rescue, protect, guard, feed, pet, brush, comb, cuddle, tickle, kiss
thank, forgive, apologize, promise, remember, forget, notice, guess, choose, decide, plan, practice
win, lose, finish, begin, follow, lead, meet, greet, welcome, invite, celebrate, decorate, wrap, unwrap
measure, weigh, sort, match, collect, gather, save, spend, camp, fish, hike, skate, ski, sled, surf
juggle, tumble, somersault, gallop, trot, waddle, flutter, buzz, chirp, bark, meow, quack, moo, roar
""")

PLACES = _words("""
in the park
at the beach
in a big forest
on a farm
in the garden
in a small village
in the city
at school
in the kitchen
in the backyard
on a sunny hill
by a quiet lake
by the river
under a big tree
in a cozy house
at grandma's house
in a toy shop
at the zoo
at the market
in a bakery
at the library
on a boat
on a train
on an island
in a cave
on a mountain
in the snow
in the rain
on a windy day
at night
in the morning
at a birthday party
at the playground
in a treehouse
in a castle
in the jungle
in the desert
under the sea
in outer space
on the moon
in a meadow full of flowers
in a barn
near a pond
at the swimming pool
in a big city park
at the fair
at the circus
in a museum
at the doctor's office
in a classroom
on the bus
at the train station
at the airport
in a tent
at a campfire
in a field of sunflowers
in the attic
in the basement
on the roof
in a little boat
by the sea
in a busy street
in a quiet street
at the corner shop
in the woods
near a waterfall
on a bridge
in a hospital
at a fire station
in a post office
in the countryside
in a flower shop
at a farm stand
in a pumpkin patch
in an apple orchard
at a picnic
on a rainy afternoon
on a snowy morning
on a hot summer day
on a cold winter night
in autumn
in spring
at bedtime
at breakfast
at lunchtime
in a big old house
in a small apartment
in a secret garden
in a magic forest
in a land of candy
in a dragon's cave
in a fairy village
on a pirate ship
in an old lighthouse
at the top of a tower
under the bed
in a closet
behind the sofa
in a puddle
in a sandbox
on a soccer field
at a music class
at a dance class
in the bathtub
at the dentist
in a pet shop
at the ice rink
on a farm with many animals
in a hot air balloon
in a submarine
on a rocket ship
in a snowy forest
by a little stream
in a bamboo forest
on a coral reef
in a nest high in a tree
in a busy kitchen
in a quiet library
at the bus stop
in the school garden
in a toy box
on a sleepy afternoon
in a rainy town
by a cozy fireplace
at the lake house
in grandpa's workshop
at the farmers market
in a tiny mouse house
on a big ship
in a paper boat
at a sleepover
in the car
on a long walk
at a water park
in a butterfly garden
at an ice cream shop
in a small cottage
near the old mill
""")

ADJECTIVES = _words("""
big, small, little, tiny, huge, tall, short, long, round, soft, hard, warm, cold, hot, wet, dry, fluffy
shiny, sparkly, bright, dark, quiet, loud, happy, sad, silly, funny, brave, shy, kind, gentle, friendly
grumpy, sleepy, hungry, thirsty, curious, clever, busy, lazy, fast, slow, new, old, clean, dirty, messy
pretty, colorful, striped, spotted, red, blue, green, yellow, orange, purple, pink, brown, black, white
golden, silver, magic, secret, special, strange, lost, broken, empty, full, heavy, light, sticky, smooth
bumpy, fuzzy, furry, tiny little, lucky, proud, careful, helpful, polite, noisy, sweet, sour, tasty
fresh, juicy, crunchy, cozy, snowy, rainy, sunny, windy, foggy, muddy, sandy, wobbly, squeaky, jolly
gentle, playful, excited, nervous, surprised, worried, calm, cheerful, wise, young, giant, mighty
""")

NAMES = _words("""
Lily, Tom, Mia, Ben, Sara, Max, Anna, Sam, Lucy, Jack, Emma, Leo, Zoe, Tim, Ella, Finn, Ruby, Noah
Amy, Jake, Kim, Dan, Mila, Theo, Nora, Ivy, Owen, Lola, Kai, Rosa, Omar, Maya, Ali, Nina, Hugo, Lena
Eli, Ada, Luke, Isla, Ravi, Yuki, Pablo, Aisha, Ben, Chloe, Sophie, Oscar, Grace, Henry, Alice, Jamie
Molly, Toby, Daisy, Rosie, Freddie, Poppy, Milo, Hannah, Liam, Ava, Jonah, Clara, Felix, Iris, Juan
Priya, Kofi, Amara, Mei, Tariq, Sofia, Lucas, Emily, Arlo, Bella, Sunny, Pip, Benny, Dot, Bob, Sue
""")

# TinyStories' "features": one may be appended to a prompt.
FEATURES = [
    "Include a little dialogue.",
    "The story should have a happy ending.",
    "The story should teach a small lesson.",
    "Someone should say sorry.",
    "Someone should help a friend.",
    "There should be a surprise at the end.",
    "The story should be funny.",
    "Someone should be a little scared at first.",
    "Someone should share something.",
    "Someone should make a new friend.",
    "Someone should make a mistake and fix it.",
    "The story should be calm, for bedtime.",
]

# {a_noun}: "a ball"/"an apple"; {noun2}, {a_noun2}: a second noun; {a_adj_noun}: "a shiny kite".
STORY_TEMPLATES = [
    "Write a short story for a small child about {a_noun}, where someone learns to {verb}, set {place}.",
    "Tell a simple bedtime story about {name}, who finds {a_noun} {place}.",
    'Write a short, simple story for a three-year-old. Use the words "{noun}", "{verb}" and "{adjective}".',
    "Write a short story for kids about {a_adj_animal} that wants to {verb} {place}.",
    "Write a very short story for a young child in which {name} and {a_animal} {verb} together {place}.",
    "Write a short story for a little child about {name} and {a_adj_noun}.",
    "Tell a short, happy story for small children. It happens {place} and it is about {a_noun} and {a_noun2}.",
    "Write a simple story that a four-year-old would understand. {name} wants to {verb}, but there is a "
    "problem with {a_noun}.",
]

ANIMALS = _words("""
cat, kitten, dog, puppy, bunny, mouse, bird, duck, hen, cow, pig, horse, pony, sheep, lamb, goat, frog
turtle, fish, snail, ladybug, butterfly, bee, ant, caterpillar, owl, fox, bear, deer, squirrel, hedgehog
raccoon, beaver, wolf, lion, tiger, elephant, giraffe, zebra, monkey, hippo, crocodile, penguin, seal
whale, dolphin, octopus, crab, parrot, peacock, swan, goose, crow, robin, bat, dragon, unicorn, dinosaur
kangaroo, koala, panda, camel, llama, otter, moose, flamingo, chicken, donkey, rhino, gorilla, shark
jellyfish, starfish, seahorse, worm, spider, grasshopper, firefly, dragonfly, hamster, guinea pig
""")

# ---------------------------------------------------------------------------------------------
# Chat questions: templates over topics, answered by the model in one or two sentences
# ---------------------------------------------------------------------------------------------
FOODS = _words("""
apples, bananas, carrots, bread, cheese, eggs, rice, pasta, soup, pizza, pancakes, honey, milk, yogurt
oranges, strawberries, potatoes, tomatoes, broccoli, peas, beans, corn, cookies, ice cream, chocolate
popcorn, oatmeal, salad, sandwiches, lemons, grapes, watermelon, pumpkins, butter, jam, nuts, fish, noodles
""")

OBJECTS = _words("""
umbrella, clock, map, compass, ladder, hammer, key, candle, flashlight, mirror, pencil, eraser, ruler
scissors, magnet, thermometer, telescope, microscope, camera, bicycle, helmet, kite, balloon, broom
bucket, shovel, sponge, toothbrush, towel, pillow, blanket, backpack, wallet, calendar, globe, whistle
watering can, fridge, oven, kettle, spoon, fork, plate, bowl, cup, jar, rope, tent, boat, wheel, bell
""")

JOBS = _words("""
teacher, doctor, nurse, firefighter, police officer, farmer, baker, chef, pilot, mail carrier, dentist
vet, librarian, builder, painter, gardener, bus driver, fisherman, astronaut, scientist, zookeeper
mechanic, plumber, cashier, waiter, tailor, carpenter, photographer, musician, lifeguard, shopkeeper
""")

ACTIVITIES = _words("""
ride a bike, tie my shoes, brush my teeth, make a sandwich, plant a seed, fly a kite, make a paper plane
build a sandcastle, wash my hands, make my bed, draw a cat, make a snowman, bake cookies, learn to swim
make a new friend, say sorry, share my toys, fall asleep, catch a ball, read a book, grow a sunflower
make lemonade, feed a pet fish, take care of a puppy, pack for a picnic, set the table, clean my room
""")

FEELINGS = _words("""
sad, scared, angry, lonely, bored, nervous, shy, tired, grumpy, worried, excited, jealous, happy
""")

NATURE_QUESTIONS = [
    "Why is the sky blue?", "Why does it rain?", "Where does snow come from?", "Why do leaves change color?",
    "Why is the sea salty?", "What is a rainbow?", "Why do we have night and day?", "What makes thunder?",
    "Why does the moon change shape?", "What are clouds made of?", "Why do birds fly south?",
    "How do plants drink water?", "Why do we need sleep?", "Why do cats purr?", "How do fish breathe?",
    "Why do bees make honey?", "What is the sun?", "How many legs does a spider have?",
    "Why do we have seasons?", "What is wind?", "Why is grass green?", "How do seeds grow?",
    "Why do dogs wag their tails?", "What is an island?", "Why do we brush our teeth?",
    "Why is ice slippery?", "Where do butterflies come from?", "Why do we sweat?", "What is a volcano?",
    "How does a rainbow form?", "Why do stars twinkle?", "What is a shadow?", "Why do we wear coats in winter?",
    "How do birds build nests?", "Why does ice melt?", "What is a desert?", "Why do frogs jump?",
    "What is a planet?", "How tall is a giraffe?", "Why do owls stay awake at night?",
]

# {x}: a topic from the list named after the template.
CHAT_TEMPLATES = {
    "animal": ["What does a {x} eat?", "Where does a {x} live?", "Tell me a fun fact about the {x}.",
               "Can a {x} swim?", "What does a baby {x} look like?"],
    "food": ["Are {x} good for you?", "What can I make with {x}?", "Where do {x} come from?"],
    "object": ["What is a {x} used for?", "How do you use a {x}?"],
    "job": ["What does a {x} do?", "What does a {x} need for work?"],
    "activity": ["How do I {x}?", "Can you give me a tip to {x}?"],
    "feeling": ["I feel {x}. What can I do?", "What does it mean to feel {x}?"],
}
