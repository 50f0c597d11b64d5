"""Weather in the image of AgentGym's (AgentBoard's) tool environment, offline: questions about the weather
answered with 17 tools of Open-Meteo's shapes over a generated world.

The world is fixed (the same on every machine): 40 cities with coordinates, elevations and country codes, some
sharing a name with a town elsewhere (a lookup lists both, the city first), and every day's weather from 2022 to
2024 at each as a function of the city and the date (a seasonal curve by latitude plus noise: mean, highest and
lowest temperature, rain, snow below freezing, a PM2.5 air-quality index). A task sets the user's city and
today's date; historical tools answer days before today, forecasts today and the 16 days after it, `current`
tools today only, and stations are found by coordinates within 50 km (AgentBoard's `is_same_location`).
The tools' names, parameters and returns are AgentGym's Weather client's (its prompt lists them), and so is the
action format: `get_latitude_longitude with Action Input: {"name": "Orvale"}`, then `finish` with the answer.
The reward is AgentBoard's progress rate over the task's subgoals (the values a solver meets: where the user
is, the date, the coordinates, the data, the answer), 1 when the answer is right (`gymflow.envs.tools`).

The expert plays the shortest plan of its question's template, reading the answer from the tools' results.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import date, timedelta
from functools import lru_cache
from typing import Any

from pydantic import field_validator

from gymflow.envs.base import Task, task_rng
from gymflow.envs.names import place_name
from gymflow.envs.tools import (
    Made,
    Plan,
    TemplateHidden,
    Tool,
    ToolEnv,
    ToolError,
    day_within,
    tool_spec,
)

FIRST_DAY, LAST_DAY = date(2022, 1, 1), date(2024, 12, 31)
TASK_DAYS = (date(2023, 1, 15), date(2024, 11, 30))  # today, in a task: room for the last month and the next
FORECAST_DAYS = 16
MAX_SPAN = 31  # days one call may cover
STATION_KM = 50.0
AQI_LEVELS = ((20, "good"), (40, "fair"), (60, "moderate"), (80, "poor"), (100, "very poor"))

COUNTRIES = ("NO", "PT", "IE", "IT", "BE", "PL", "ES", "AT", "CA", "AU", "JP", "CL", "NZ", "AR", "KE")


@lru_cache(maxsize=1)
def cities() -> dict[str, dict[str, Any]]:
    """name -> latitude, longitude, elevation (m), country code, and its namesake elsewhere (or None)."""
    rng = task_rng("weather-world")
    used: set[str] = set()
    names = [place_name(rng, used) for _ in range(40)]
    world = {}
    for name in names:
        lat, lon = round(rng.uniform(-45, 65), 4), round(rng.uniform(-120, 150), 4)
        namesake = None
        if rng.random() < 0.25:
            namesake = {
                "latitude": round(rng.uniform(-45, 65), 4),
                "longitude": round(rng.uniform(-120, 150), 4),
                "country_code": rng.choice(COUNTRIES),
            }
        world[name] = {
            "latitude": lat,
            "longitude": lon,
            "elevation": rng.randint(0, 2500),
            "country_code": rng.choice(COUNTRIES),
            "namesake": namesake,
        }
    return world


def day_weather(city: str, day: date) -> dict[str, float]:
    """One day at `city`: the same numbers on every call and machine."""
    place = cities()[city]
    rng = task_rng("weather-day", city, day.isoformat())
    lat = place["latitude"]
    season = math.cos(2 * math.pi * (day.timetuple().tm_yday - 200) / 365.25) * (1 if lat >= 0 else -1)
    mean = 27 - 0.45 * abs(lat) + 0.25 * abs(lat) * season - place["elevation"] / 300 + rng.gauss(0, 3)
    rain = 0.0 if rng.random() < 0.55 else rng.expovariate(1 / 6)
    return {
        "temperature_2m_mean": round(mean, 1),
        "temperature_2m_max": round(mean + rng.uniform(2, 7), 1),
        "temperature_2m_min": round(mean - rng.uniform(2, 7), 1),
        "rain_sum": round(rain, 1) if mean >= 0 else 0.0,
        "snowfall_sum": round(rain * 0.7, 1) if mean < 0 else 0.0,
        "pm2_5": round(rng.uniform(5, 120), 1),
    }


def distance_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle distance (haversine, earth radius 6371 km)."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 6371 * 2 * math.atan2(math.sqrt(a), math.sqrt(1 - a))


def aqi_level(index: float) -> str:
    return next((name for bound, name in AQI_LEVELS if index <= bound), "extremely poor")


DATA = {  # tool family -> the daily fields it returns and their units
    "temp": {"temperature_2m_max": "°C", "temperature_2m_min": "°C", "temperature_2m_mean": "°C"},
    "rain": {"rain_sum": "mm"},
    "snow": {"snowfall_sum": "cm"},
    "air_quality_index": {"pm2_5": "μg/m³"},
}
PLACE = (
    ("latitude", "number", "The latitude of the location."),
    ("longitude", "number", "The longitude of the location."),
)
SPAN = (
    ("start_date", "string", "The first day (YYYY-MM-DD)."),
    ("end_date", "string", "The last day (YYYY-MM-DD)."),
)
ON = (("current_date", "string", "Today's date (YYYY-MM-DD)."),)


def _tools() -> list[Tool]:
    out = [
        Tool(
            "get_user_current_date",
            "Get the user's current date.",
            (),
            "The current date in 'YYYY-MM-DD' format.",
        ),
        Tool("get_user_current_location", "Get the user's current city.", (), "The user's current city."),
    ]
    for family, what in (("temp", "temperature"), ("rain", "rainfall"), ("snow", "snowfall")):
        out += [
            Tool(
                f"get_historical_{family}",
                f"Get historical {what} data for a location and date range.",
                PLACE + SPAN,
                f"Historical {what} data.",
            ),
            Tool(
                f"get_{family}_forecast",
                f"Get {what} forecast data for a location and date range.",
                PLACE + SPAN,
                f"{what.capitalize()} forecast data.",
            ),
            Tool(
                f"get_current_{family}",
                f"Get current {what} data for a location and date.",
                PLACE + ON,
                f"Current {what} data.",
            ),
        ]
    out += [
        Tool(
            "get_latitude_longitude",
            "Get latitude and longitude information for a location name.",
            (("name", "string", "The name of the location (e.g., a city name)."),),
            "Latitude and longitude information for the specified location.",
        ),
        Tool("get_elevation", "Get elevation data for a location.", PLACE, "Elevation data (m)."),
        Tool(
            "get_distance",
            "Calculate the distance between two sets of latitude and longitude coordinates.",
            (
                ("latitude1", "number", "The first latitude."),
                ("longitude1", "number", "The first longitude."),
                ("latitude2", "number", "The second latitude."),
                ("longitude2", "number", "The second longitude."),
            ),
            "The distance between the two sets of coordinates in kilometers.",
        ),
        Tool(
            "get_historical_air_quality_index",
            "Get historical air quality index data for a location and date range.",
            PLACE + SPAN,
            "Historical air quality index (PM2.5) data.",
        ),
        Tool(
            "get_current_air_quality_index",
            "Get current air quality index data for a location and date.",
            PLACE + ON,
            "Current air quality index (PM2.5) data.",
        ),
        Tool(
            "get_air_quality_level",
            "Determine the air quality level from the air quality index (AQI).",
            (("air_quality_index", "number", "The air quality index (AQI) value."),),
            "The air quality level: 'good', 'fair', 'moderate', 'poor', 'very poor' or 'extremely poor'.",
        ),
        Tool("check_valid_actions", "Get supported actions for current tool.", (), "The supported actions."),
    ]
    return out


TOOLS = _tools()
EXAMPLE = (
    "Goal: What is the lowest temperature today?\nThought: I need to know where the user is.\n"
    "Action: get_user_current_location with Action Input: {}\nObservation: Orvale\n"
    'Thought: I need the coordinates of Orvale.\nAction: get_latitude_longitude with Action Input: {"name": '
    '"Orvale"}\nObservation: {"results": [{"name": "Orvale", "latitude": 12.5, "longitude": 40.1, ...}]}\n'
    "... then get_user_current_date and get_current_temp, and:\n"
    'Action: finish with Action Input: {"answer": 3.2}'
)


# ---- tasks: each template gives its question, the expert's plan, the answer and the subgoals -------------------


def _where(city: str) -> tuple[float, float]:
    return cities()[city]["latitude"], cities()[city]["longitude"]


def _located(city: str, plan: Plan) -> dict[str, Any]:
    plan.append((f"I need the coordinates of {city}.", "get_latitude_longitude", {"name": city}))
    lat, lon = _where(city)
    return {"latitude": lat, "longitude": lon}


def _mine(today: date, city: str, plan: Plan) -> dict[str, Any]:
    plan.append(("I need to know where the user is.", "get_user_current_location", {}))
    plan.append(("I need today's date.", "get_user_current_date", {}))
    return _located(city, plan)


def _t_yesterday_mean(rng: Any, today: date, home: str) -> tuple[str, str, Plan, Any, list[Any]]:
    plan: Plan = []
    at = _mine(today, home, plan)
    day = (today - timedelta(days=1)).isoformat()
    plan.append((f"Yesterday was {day}.", "get_historical_temp", {**at, "start_date": day, "end_date": day}))
    answer = day_weather(home, today - timedelta(days=1))["temperature_2m_mean"]
    return (
        "medium",
        "What was the average temperature in Celsius yesterday? Please provide the answer as a number.",
        plan,
        answer,
        [home, today.isoformat(), at["latitude"], at["longitude"], answer],
    )


def _t_city_max(rng: Any, today: date, home: str) -> tuple[str, str, Plan, Any, list[Any]]:
    city = rng.choice(sorted(cities()))
    day = today - timedelta(days=rng.randint(2, 25))
    plan: Plan = []
    at = _located(city, plan)
    iso = day.isoformat()
    plan.append(
        (f"I look up {iso} in {city}.", "get_historical_temp", {**at, "start_date": iso, "end_date": iso})
    )
    answer = day_weather(city, day)["temperature_2m_max"]
    return (
        "easy",
        f"What was the highest temperature in {city} on {iso}? Please provide the answer as a number.",
        plan,
        answer,
        [at["latitude"], at["longitude"], answer],
    )


def _t_tomorrow_mean(rng: Any, today: date, home: str) -> tuple[str, str, Plan, Any, list[Any]]:
    plan: Plan = []
    at = _mine(today, home, plan)
    day = (today + timedelta(days=1)).isoformat()
    plan.append((f"Tomorrow is {day}.", "get_temp_forecast", {**at, "start_date": day, "end_date": day}))
    answer = day_weather(home, today + timedelta(days=1))["temperature_2m_mean"]
    return (
        "medium",
        "What is the average temperature tomorrow according to the forecast? Please provide the "
        "answer as a number.",
        plan,
        answer,
        [home, today.isoformat(), at["latitude"], at["longitude"], answer],
    )


def _t_rain_total(rng: Any, today: date, home: str) -> tuple[str, str, Plan, Any, list[Any]]:
    days = rng.randint(3, 10)
    plan: Plan = []
    at = _mine(today, home, plan)
    first, last = today - timedelta(days=days), today - timedelta(days=1)
    plan.append(
        (
            f"The last {days} days run from {first} to {last}.",
            "get_historical_rain",
            {**at, "start_date": first.isoformat(), "end_date": last.isoformat()},
        )
    )
    answer = round(sum(day_weather(home, first + timedelta(days=i))["rain_sum"] for i in range(days)), 1)
    return (
        "hard",
        f"How much rain fell in my city over the last {days} days, in mm in total? Please provide the "
        "answer as a number.",
        plan,
        answer,
        [home, today.isoformat(), at["latitude"], at["longitude"], answer],
    )


def _t_higher(rng: Any, today: date, home: str) -> tuple[str, str, Plan, Any, list[Any]]:
    a, b = rng.sample(sorted(cities()), 2)
    if cities()[a]["elevation"] == cities()[b]["elevation"]:
        b = next(c for c in sorted(cities()) if cities()[c]["elevation"] != cities()[a]["elevation"])
    plan: Plan = []
    at_a, at_b = _located(a, plan), _located(b, plan)
    plan.append((f"The elevation of {a}.", "get_elevation", at_a))
    plan.append((f"The elevation of {b}.", "get_elevation", at_b))
    answer = a if cities()[a]["elevation"] > cities()[b]["elevation"] else b
    return (
        "medium",
        f"Which is higher above sea level, {a} or {b}? Please provide the city's name.",
        plan,
        answer,
        [at_a["latitude"], at_b["latitude"], cities()[a]["elevation"], cities()[b]["elevation"]],
    )


def _t_distance(rng: Any, today: date, home: str) -> tuple[str, str, Plan, Any, list[Any]]:
    a, b = rng.sample(sorted(cities()), 2)
    plan: Plan = []
    at_a, at_b = _located(a, plan), _located(b, plan)
    args = {
        "latitude1": at_a["latitude"],
        "longitude1": at_a["longitude"],
        "latitude2": at_b["latitude"],
        "longitude2": at_b["longitude"],
    }
    plan.append(("I measure the distance between them.", "get_distance", args))
    answer = round(distance_km(*args.values()), 1)
    return (
        "easy",
        f"How far is {a} from {b}, in kilometers? Please provide the answer as a number.",
        plan,
        answer,
        [at_a["latitude"], at_b["latitude"], answer],
    )


def _t_air_level(rng: Any, today: date, home: str) -> tuple[str, str, Plan, Any, list[Any]]:
    plan: Plan = []
    at = _mine(today, home, plan)
    iso = today.isoformat()
    plan.append(("Today's air quality index.", "get_current_air_quality_index", {**at, "current_date": iso}))
    index = day_weather(home, today)["pm2_5"]
    plan.append(("The level of that index.", "get_air_quality_level", {"air_quality_index": index}))
    answer = aqi_level(index)
    return (
        "hard",
        "What is the air quality level in my city today? Please provide the level's name.",
        plan,
        answer,
        [home, iso, at["latitude"], at["longitude"], index, answer],
    )


def _t_warmer_today(rng: Any, today: date, home: str) -> tuple[str, str, Plan, Any, list[Any]]:
    plan: Plan = []
    at = _mine(today, home, plan)
    iso, before = today.isoformat(), (today - timedelta(days=1)).isoformat()
    plan.append(("Today's temperature.", "get_current_temp", {**at, "current_date": iso}))
    plan.append(
        ("Yesterday's temperature.", "get_historical_temp", {**at, "start_date": before, "end_date": before})
    )
    now, then = (
        day_weather(home, today)["temperature_2m_mean"],
        day_weather(home, today - timedelta(days=1))["temperature_2m_mean"],
    )
    answer = "Yes" if now > then else "No"
    return (
        "hard",
        "Is the average temperature today higher than yesterday? Please answer Yes or No.",
        plan,
        answer,
        [home, iso, at["latitude"], now, then, answer],
    )


TEMPLATES: dict[str, Callable[[Any, date, str], tuple[str, str, Plan, Any, list[Any]]]] = {
    "yesterday_mean": _t_yesterday_mean,
    "city_max": _t_city_max,
    "tomorrow_mean": _t_tomorrow_mean,
    "rain_total": _t_rain_total,
    "higher": _t_higher,
    "distance": _t_distance,
    "air_level": _t_air_level,
    "warmer_today": _t_warmer_today,
}


class WeatherHidden(TemplateHidden):
    templates = TEMPLATES
    current_date: str
    current_location: str
    answer: float | int | str

    @field_validator("current_date")
    @classmethod
    def _today(cls, value: str) -> str:
        return day_within(value, *TASK_DAYS)

    @field_validator("current_location")
    @classmethod
    def _home(cls, value: str) -> str:
        if value not in cities():
            raise ValueError("not a city of the world")
        return value


class Weather(ToolEnv):
    hidden_schema = WeatherHidden
    spec = tool_spec(
        "weather",
        "weather questions over 17 tools (AgentBoard)",
        TOOLS,
        EXAMPLE,
        max_turns=15,
        expert="the template's shortest plan",
    )

    @classmethod
    def draw(cls, rng: Any) -> dict[str, Any]:
        name = rng.choice(sorted(TEMPLATES))
        today = TASK_DAYS[0] + timedelta(days=rng.randrange((TASK_DAYS[1] - TASK_DAYS[0]).days + 1))
        home = rng.choice(sorted(cities()))
        return {
            "template": name,
            "choices": rng.randrange(2**31),  # seeds the template's own draws (which cities, which days)
            "current_date": today.isoformat(),
            "current_location": home,
        }

    @classmethod
    def make(cls, hidden: dict[str, Any]) -> Made:
        today, home = date.fromisoformat(hidden["current_date"]), hidden["current_location"]
        level, question, plan, answer, subgoals = TEMPLATES[hidden["template"]](
            task_rng("weather-choices", hidden["choices"]), today, home
        )
        return Made(level, question, answer, subgoals, plan)

    def begin(self, task: Task) -> None:
        self.today = date.fromisoformat(task.hidden["current_date"])
        self.home = task.hidden["current_location"]

    # ---- the tools --------------------------------------------------------------------------------------------

    def tools(self) -> dict[str, tuple[Tool, Callable[..., Any]]]:
        runs: dict[str, Callable[..., Any]] = {
            "get_user_current_date": lambda: self.today.isoformat(),
            "get_user_current_location": lambda: self.home,
            "get_latitude_longitude": self._lookup,
            "get_elevation": lambda latitude, longitude: {
                "elevation": cities()[self._station(latitude, longitude)]["elevation"]
            },
            "get_distance": lambda latitude1, longitude1, latitude2, longitude2: round(
                distance_km(latitude1, longitude1, latitude2, longitude2), 1
            ),
            "get_air_quality_level": lambda air_quality_index: aqi_level(air_quality_index),
            "check_valid_actions": lambda: [t.name for t in TOOLS] + ["finish"],
        }
        for family in DATA:
            runs[f"get_historical_{family}"] = self._series(family, "historical")
            runs[f"get_current_{family}"] = self._series(family, "current")
            if family != "air_quality_index":
                runs[f"get_{family}_forecast"] = self._series(family, "forecast")
        return {t.name: (t, runs[t.name]) for t in TOOLS}

    def _lookup(self, name: str) -> dict[str, Any]:
        matches = [c for c in cities() if c.lower() == name.strip().lower()]
        if not matches:
            raise ToolError(f'no location named "{name[:40]}"')
        city = cities()[matches[0]]
        results = [
            {
                "name": matches[0],
                "latitude": city["latitude"],
                "longitude": city["longitude"],
                "country_code": city["country_code"],
            }
        ]
        if city["namesake"]:
            results.append({"name": matches[0], **city["namesake"]})
        return {"results": results}

    def _station(self, latitude: float, longitude: float) -> str:
        near = min(cities(), key=lambda c: distance_km(latitude, longitude, *_where(c)))
        if distance_km(latitude, longitude, *_where(near)) > STATION_KM:
            raise ToolError(f"no weather station within {STATION_KM:g} km of ({latitude}, {longitude})")
        return near

    def _series(self, family: str, kind: str) -> Callable[..., Any]:
        def run(latitude: float, longitude: float, **days: str) -> dict[str, Any]:
            city = self._station(latitude, longitude)
            if kind == "current":
                first = last = _parse(days["current_date"])
                if first != self.today:
                    raise ToolError(f"current data is for today ({self.today}) only")
            else:
                first, last = _parse(days["start_date"]), _parse(days["end_date"])
                if last < first or (last - first).days >= MAX_SPAN:
                    raise ToolError(f"give a range of 1 to {MAX_SPAN} days, start_date first")
                if kind == "historical" and last >= self.today:
                    raise ToolError(f"historical data ends the day before today ({self.today})")
                if kind == "forecast" and not self.today <= first <= last <= self.today + timedelta(
                    days=FORECAST_DAYS
                ):
                    raise ToolError(
                        f"forecasts cover today ({self.today}) and the {FORECAST_DAYS} days after"
                    )
            span = [first + timedelta(days=i) for i in range((last - first).days + 1)]
            fields = DATA[family]
            lat, lon = _where(city)
            return {
                "latitude": lat,
                "longitude": lon,
                "daily_units": {"time": "iso8601", **fields},
                "daily": {
                    "time": [d.isoformat() for d in span],
                    **{f: [day_weather(city, d)[f] for d in span] for f in fields},
                },
            }

        return run


def _parse(text: str) -> date:
    try:
        day = date.fromisoformat(text)
    except ValueError:
        raise ToolError(f'"{text[:20]}" is not a date YYYY-MM-DD') from None
    if not FIRST_DAY <= day <= LAST_DAY:
        raise ToolError(f"there are no data for {day} (they run from {FIRST_DAY} to {LAST_DAY})")
    return day
