"""Guess the number, an OpenEnv environment (openenv-core 0.3): its server is `tempo_rl_guess:app`
(`python_env.openenv.app`), started by the environment worker as a local process, or by hand with
`python -m uvicorn tempo_rl_guess:app --port 8000` and named by its URL (`python_env.openenv.url`).

reset(seed) thinks of a whole number in [low, high] (seeded: the same seed, the same number); each
step takes a guess and answers "higher", "lower" or "correct". The reward is 1 on the right guess
(the episode ends), else 0; out of guesses, the episode ends. Its state lives in the server's
session, so a session lost mid-episode is rebuilt by replaying the guesses (docs/environments.md)."""

from __future__ import annotations

import random
from typing import Any

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


class GuessAction(Action):
    guess: int = Field(description="the whole number guessed")


class GuessObservation(Observation):
    message: str = Field(default="", description="the environment's answer")
    guesses_left: int = Field(default=0, ge=0)


class GuessState(State):
    low: int = 1
    high: int = 100
    guesses: list[int] = Field(default_factory=list)


class GuessEnvironment(Environment[GuessAction, GuessObservation, GuessState]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = GuessState()
        self._secret = 0
        self._max_guesses = 0

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        low: int = 1,
        high: int = 100,
        max_guesses: int = 7,
        **_: Any,
    ) -> GuessObservation:
        if high < low or max_guesses < 1:
            raise ValueError(f"need low <= high and max_guesses >= 1 (low={low}, high={high}, max={max_guesses})")
        self._secret = random.Random(seed).randint(low, high)
        self._max_guesses = max_guesses
        self._state = GuessState(episode_id=episode_id, low=low, high=high)
        return GuessObservation(
            message=f"I am thinking of a whole number from {low} to {high}. Guess it: you have {max_guesses} guesses.",
            guesses_left=max_guesses,
        )

    def step(self, action: GuessAction, timeout_s: float | None = None, **_: Any) -> GuessObservation:
        s = self._state
        s.step_count += 1
        s.guesses.append(action.guess)
        left = self._max_guesses - len(s.guesses)
        if action.guess == self._secret:
            return GuessObservation(message=f"Correct: it is {self._secret}.", guesses_left=left, done=True, reward=1.0)
        hint = "higher" if action.guess < self._secret else "lower"
        if left <= 0:
            return GuessObservation(
                message=f"{action.guess} is wrong and you are out of guesses: it was {self._secret}.",
                guesses_left=0,
                done=True,
                reward=0.0,
            )
        plural = "es" if left != 1 else ""
        return GuessObservation(
            message=f"{action.guess} is wrong: the number is {hint}. {left} guess{plural} left.",
            guesses_left=left,
            reward=0.0,
        )

    @property
    def state(self) -> GuessState:
        return self._state


app = create_app(GuessEnvironment, GuessAction, GuessObservation, env_name="tempo_rl_guess", max_concurrent_envs=64)
