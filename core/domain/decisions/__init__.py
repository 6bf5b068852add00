"""What to do with one object, pure: its decision (`decision`), due time (`due`), the schedule's
intents (`plan`), staged cleanup (`stages`), keep-last (`keeplast`), the worker's judgement
(`judgement`), the first-run review's rule (`review`), the reference clock (`clock`), the
archive's plan (`archive`).
"""
