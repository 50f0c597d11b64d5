"""TODOList in the image of AgentGym's (AgentBoard's) Todoist tool environment, offline: questions about a to-do
account, and changes to it, made with its 11 tools over an account generated from the task's seed.

An account holds 5 projects drawn from `THEMES`, each with 3 to 5 tasks (content, priority 1-4 where 4 is the
most urgent, a due date within three weeks of today, a duration in minutes, a description, done or not), with
Todoist-like string ids. Questions ask for a due date, the most urgent task of a project, a duration, or how
many open tasks are due before a date; changes ask to complete a task, move its due date, delete a project's
overdue tasks, or mark a project favourite. A question succeeds when `finish` gives its answer; a change when
`finish` is called with the account exactly as the change leaves it: nothing else changed (the collateral
check of apps and AppWorld). The reward is AgentBoard's progress rate over the subgoals (the ids and values a
solver meets), 1 on success (`gymflow.envs.tools`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import date, timedelta
from typing import Any

from pydantic import field_validator

from gymflow.envs.base import Task, task_rng
from gymflow.envs.tools import (
    Made,
    Plan,
    TemplateHidden,
    Tool,
    ToolEnv,
    ToolError,
    day_within,
    same_answer,
    tool_spec,
)

TODAY_RANGE = (date(2023, 1, 10), date(2024, 12, 10))
THEMES = {
    "Homework and Assignments": [
        "Solve algebra equations",
        "Write a history essay",
        "Read a biology chapter",
        "Prepare a chemistry report",
        "Practise French verbs",
    ],
    "Household Chores": [
        "Clean the kitchen",
        "Do the laundry",
        "Water the plants",
        "Take out the recycling",
        "Vacuum the living room",
    ],
    "Picnic Preparation": [
        "Buy fresh fruit",
        "Pack the blanket",
        "Make sandwiches",
        "Check the weather",
        "Invite the neighbours",
    ],
    "Science Fair Project": [
        "Choose a topic",
        "Build the model",
        "Print the poster",
        "Rehearse the talk",
        "Collect the measurements",
    ],
    "Fitness Plan": [
        "Run five kilometres",
        "Book a yoga class",
        "Stretch after work",
        "Swim twenty laps",
        "Plan weekly meals",
    ],
    "Home Office": [
        "Order a new chair",
        "Back up the laptop",
        "Renew the software licence",
        "Sort the cables",
        "File the receipts",
    ],
    "Birthday Party": [
        "Order the cake",
        "Send invitations",
        "Buy decorations",
        "Book the hall",
        "Plan the games",
    ],
    "Garden Makeover": [
        "Prune the roses",
        "Plant tulip bulbs",
        "Fix the fence",
        "Mow the lawn",
        "Spread the compost",
    ],
}
CITIES = ("New York", "Lisbon", "Oslo", "Nairobi", "Osaka", "Lima")


def account(choices: int, today: date) -> dict[str, Any]:
    """The account of task seed `choices`: projects and tasks, the same on every machine."""
    rng = task_rng("todo-account", choices)
    projects, tasks = [], []
    for order, name in enumerate(rng.sample(sorted(THEMES), 5), start=1):
        pid = str(rng.randrange(2_000_000_000, 2_999_999_999))
        projects.append(
            {
                "id": pid,
                "name": name,
                "order": order,
                "color": rng.choice(["charcoal", "blue", "red"]),
                "is_favorite": False,
            }
        )
        for t_order, content in enumerate(rng.sample(THEMES[name], rng.randint(3, 5)), start=1):
            tasks.append(
                {
                    "id": str(rng.randrange(7_000_000_000, 7_999_999_999)),
                    "project_id": pid,
                    "order": t_order,
                    "content": content,
                    "description": f"{content}, as planned for {name.lower()}.",
                    "is_completed": rng.random() < 0.15,
                    "priority": rng.randint(1, 4),
                    "due_date": (today + timedelta(days=rng.randint(-10, 20))).isoformat(),
                    "duration": {"amount": rng.choice([15, 30, 45, 60, 90, 120]), "unit": "minute"},
                }
            )
    return {"projects": projects, "tasks": tasks}


def _project(state: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in state["projects"] if p["name"] == name)


def _tasks_of(state: dict[str, Any], pid: str) -> list[dict[str, Any]]:
    return [t for t in state["tasks"] if t["project_id"] == pid]


# ---- templates: (level, question, expected state or None, answer, subgoals, plan) --------------------------------

# a template's draw: (level, question, the state a change must leave or None, answer, subgoals, plan)
Drawn = tuple[str, str, dict[str, Any] | None, Any, list[Any], Plan]


def _open_project(state: dict[str, Any], name: str, plan: Plan) -> str:
    pid = _project(state, name)["id"]
    plan.append(("I list the projects to find its id.", "get_projects", {}))
    plan.append((f"I list the tasks of {name}.", "get_tasks", {"project_id": pid}))
    return pid


def _t_due(rng: Any, state: dict[str, Any], today: date) -> Drawn:
    task = rng.choice(state["tasks"])
    name = next(p["name"] for p in state["projects"] if p["id"] == task["project_id"])
    plan: Plan = []
    pid = _open_project(state, name, plan)
    return (
        "easy",
        f"When is the due date of {task['content']} in {name}? Please provide the answer in the "
        "YYYY-MM-DD format.",
        None,
        task["due_date"],
        [pid, task["due_date"]],
        plan,
    )


def _t_urgent(rng: Any, state: dict[str, Any], today: date) -> Drawn | None:
    name = rng.choice(state["projects"])["name"]
    tasks = sorted(_tasks_of(state, _project(state, name)["id"]), key=lambda t: -t["priority"])
    if len(tasks) > 1 and tasks[0]["priority"] == tasks[1]["priority"]:
        return None
    plan: Plan = []
    pid = _open_project(state, name, plan)
    return (
        "medium",
        f"Which task of {name} is the most urgent (priority 4 is the most urgent)? Please provide "
        "the task's content.",
        None,
        tasks[0]["content"],
        [pid, tasks[0]["content"]],
        plan,
    )


def _t_duration(rng: Any, state: dict[str, Any], today: date) -> Drawn:
    task = rng.choice(state["tasks"])
    name = next(p["name"] for p in state["projects"] if p["id"] == task["project_id"])
    plan: Plan = []
    pid = _open_project(state, name, plan)
    plan.append(("I look up its duration.", "get_task_duration", {"task_id": task["id"]}))
    minutes = task["duration"]["amount"]
    return (
        "medium",
        f"How many minutes will {task['content']} in {name} take? Please provide the answer as a number.",
        None,
        minutes,
        [pid, task["id"], minutes],
        plan,
    )


def _t_due_before(rng: Any, state: dict[str, Any], today: date) -> Drawn:
    limit = today + timedelta(days=rng.randint(1, 10))
    plan: Plan = [("I list the projects.", "get_projects", {})]
    for p in state["projects"]:
        plan.append((f"I list the tasks of {p['name']}.", "get_tasks", {"project_id": p["id"]}))
    count = sum(not t["is_completed"] and t["due_date"] < limit.isoformat() for t in state["tasks"])
    return (
        "hard",
        f"How many open tasks, over all my projects, are due before {limit.isoformat()}? Please "
        "provide the answer as a number.",
        None,
        count,
        [p["id"] for p in state["projects"]] + [count],
        plan,
    )


def _t_complete(rng: Any, state: dict[str, Any], today: date) -> Drawn | None:
    open_tasks = [t for t in state["tasks"] if not t["is_completed"]]
    if not open_tasks:
        return None
    task = rng.choice(open_tasks)
    name = next(p["name"] for p in state["projects"] if p["id"] == task["project_id"])
    plan: Plan = []
    pid = _open_project(state, name, plan)
    plan.append(("I mark it completed.", "complete_task", {"task_id": task["id"]}))
    after = copy.deepcopy(state)
    next(t for t in after["tasks"] if t["id"] == task["id"])["is_completed"] = True
    return (
        "medium",
        f"I finished {task['content']} in {name}: mark it as completed.",
        after,
        None,
        [pid, task["id"]],
        plan,
    )


def _t_postpone(rng: Any, state: dict[str, Any], today: date) -> Drawn:
    task = rng.choice(state["tasks"])
    name = next(p["name"] for p in state["projects"] if p["id"] == task["project_id"])
    new = (date.fromisoformat(task["due_date"]) + timedelta(days=rng.randint(2, 9))).isoformat()
    plan: Plan = []
    pid = _open_project(state, name, plan)
    plan.append((f"I move its due date to {new}.", "update_task", {"task_id": task["id"], "due_date": new}))
    after = copy.deepcopy(state)
    next(t for t in after["tasks"] if t["id"] == task["id"])["due_date"] = new
    return (
        "medium",
        f"Move the due date of {task['content']} in {name} to {new}.",
        after,
        None,
        [pid, task["id"], new],
        plan,
    )


def _t_delete_overdue(rng: Any, state: dict[str, Any], today: date) -> Drawn | None:
    name = rng.choice(state["projects"])["name"]
    pid = _project(state, name)["id"]
    overdue = [
        t for t in _tasks_of(state, pid) if not t["is_completed"] and t["due_date"] < today.isoformat()
    ]
    if not overdue:
        return None
    plan: Plan = [("I need today's date.", "get_user_current_date", {})]
    _open_project(state, name, plan)
    for t in overdue:
        plan.append((f"{t['content']} is overdue.", "delete_task", {"task_id": t["id"]}))
    gone = {t["id"] for t in overdue}
    after = {
        "projects": copy.deepcopy(state["projects"]),
        "tasks": [t for t in copy.deepcopy(state["tasks"]) if t["id"] not in gone],
    }
    return (
        "hard",
        f"Delete every open task of {name} whose due date has passed.",
        after,
        None,
        [today.isoformat(), pid, *sorted(gone)],
        plan,
    )


def _t_favorite(rng: Any, state: dict[str, Any], today: date) -> Drawn:
    name = rng.choice(state["projects"])["name"]
    pid = _project(state, name)["id"]
    after = copy.deepcopy(state)
    _project(after, name)["is_favorite"] = True
    plan: Plan = [
        ("I list the projects to find its id.", "get_projects", {}),
        ("I mark it favourite.", "update_project", {"project_id": pid, "is_favorite": "true"}),
    ]
    return ("easy", f"Mark the project {name} as a favourite.", after, None, [pid, True], plan)


TEMPLATES: dict[str, Callable[[Any, dict[str, Any], date], Drawn | None]] = {
    "due": _t_due,
    "urgent": _t_urgent,
    "duration": _t_duration,
    "due_before": _t_due_before,
    "complete": _t_complete,
    "postpone": _t_postpone,
    "delete_overdue": _t_delete_overdue,
    "favorite": _t_favorite,
}

TASK_ID = (("task_id", "string", "The task's id."),)
TOOLS = [
    Tool(
        "get_user_current_date",
        "Get the user's current date.",
        (),
        "The current date in 'YYYY-MM-DD' format.",
    ),
    Tool("get_user_current_location", "Get the user's current city.", (), "The user's current city."),
    Tool(
        "get_projects",
        "Get all projects in the Todoist account.",
        (),
        "A list of projects (id, name, order, color, is_favorite).",
    ),
    Tool(
        "update_project",
        "Update a project.",
        (("project_id", "string", "The project's id."), ("is_favorite", "string", "'true' or 'false'.")),
        "The updated project.",
    ),
    Tool(
        "get_tasks",
        "Get all tasks for a given project.",
        (("project_id", "string", "The project's id."),),
        "A list of tasks (id, order, content, is_completed, priority, due_date).",
    ),
    Tool(
        "get_task_description", "Get the description of a specific task.", TASK_ID, "The task's description."
    ),
    Tool("get_task_duration", "Get the duration of a specific task.", TASK_ID, "The task's duration."),
    Tool("complete_task", "Mark a task as completed.", TASK_ID, "The completed task."),
    Tool(
        "update_task",
        "Update a task's due date.",
        (*TASK_ID, ("due_date", "string", "YYYY-MM-DD.")),
        "The updated task.",
    ),
    Tool("delete_task", "Delete a specific task.", TASK_ID, "The deleted task."),
    Tool("check_valid_actions", "Get supported actions for current tool.", (), "The supported actions."),
]
EXAMPLE = (
    "Goal: Is Prune the roses in Garden Makeover done?\nThought: I need the project's id.\n"
    'Action: get_projects with Action Input: {}\nObservation: [{"id": "2207431122", "name": "Garden '
    'Makeover", ...}]\nThought: I list its tasks.\nAction: get_tasks with Action Input: {"project_id": '
    '"2207431122"}\nObservation: [{"id": "7120001111", "content": "Prune the roses", "is_completed": '
    'false, ...}]\nAction: finish with Action Input: {"answer": "No"}'
)


class TodoHidden(TemplateHidden):
    templates = TEMPLATES
    current_date: str

    @field_validator("current_date")
    @classmethod
    def _today(cls, value: str) -> str:
        return day_within(value, *TODAY_RANGE)


class Todo(ToolEnv):
    hidden_schema = TodoHidden
    spec = tool_spec("todo", "a to-do account over 11 tools (AgentBoard)", TOOLS, EXAMPLE, max_turns=20)

    @classmethod
    def draw(cls, rng: Any) -> dict[str, Any]:
        name = rng.choice(sorted(TEMPLATES))
        today = TODAY_RANGE[0] + timedelta(days=rng.randrange((TODAY_RANGE[1] - TODAY_RANGE[0]).days + 1))
        return {"template": name, "choices": rng.randrange(2**31), "current_date": today.isoformat()}

    @classmethod
    def make(cls, hidden: dict[str, Any]) -> Made | None:
        """The account of the task's seed and date, and what the template makes of them."""
        today = date.fromisoformat(hidden["current_date"])
        state = account(hidden["choices"], today)
        out = TEMPLATES[hidden["template"]](task_rng("todo-choices", hidden["choices"]), state, today)
        if out is None:
            return None
        level, question, expected, answer, subgoals, plan = out
        return Made(level, question, answer, subgoals, plan, expected, world=state)

    def begin(self, task: Task) -> None:
        self.state, self.today = self.world, date.fromisoformat(task.hidden["current_date"])

    def finish_step(self) -> tuple[str, str]:
        if self.expected is None:
            return super().finish_step()
        return "The account is as the goal asks.", 'finish with Action Input: {"answer": "done"}'

    def finished_right(self, answer: Any) -> bool:
        if self.expected is not None:  # a change: the account as it leaves it, nothing else
            return self.state == self.expected
        return same_answer(answer, self.task.hidden["answer"])

    # ---- the tools ----------------------------------------------------------------------------------------------

    def tools(self) -> dict[str, tuple[Tool, Callable[..., Any]]]:
        runs: dict[str, Callable[..., Any]] = {
            "get_user_current_date": lambda: self.today.isoformat(),
            "get_user_current_location": lambda: task_rng("todo-city", self.task.task_id).choice(CITIES),
            "get_projects": lambda: self.state["projects"],
            "update_project": self._update_project,
            "get_tasks": lambda project_id: [
                {k: t[k] for k in ("id", "order", "content", "is_completed", "priority", "due_date")}
                for t in _tasks_of(self.state, self._project_id(project_id))
            ],
            "get_task_description": lambda task_id: {
                k: self._task(task_id)[k] for k in ("id", "content", "description")
            },
            "get_task_duration": lambda task_id: {
                k: self._task(task_id)[k] for k in ("id", "content", "duration")
            },
            "complete_task": self._complete,
            "update_task": self._update_task,
            "delete_task": self._delete,
            "check_valid_actions": lambda: [t.name for t in TOOLS] + ["finish"],
        }
        return {t.name: (t, runs[t.name]) for t in TOOLS}

    def _project_id(self, project_id: str) -> str:
        if not any(p["id"] == project_id for p in self.state["projects"]):
            raise ToolError(f'no project with id "{project_id[:20]}"; get_projects lists them')
        return project_id

    def _task(self, task_id: str) -> dict[str, Any]:
        found = next((t for t in self.state["tasks"] if t["id"] == task_id), None)
        if found is None:
            raise ToolError(f'no task with id "{task_id[:20]}"; get_tasks lists a project\'s')
        return found

    def _update_project(self, project_id: str, is_favorite: str) -> dict[str, Any]:
        if is_favorite.lower() not in ("true", "false"):
            raise ToolError("is_favorite is 'true' or 'false'")
        project = next(p for p in self.state["projects"] if p["id"] == self._project_id(project_id))
        project["is_favorite"] = is_favorite.lower() == "true"
        return project

    def _complete(self, task_id: str) -> dict[str, Any]:
        task = self._task(task_id)
        task["is_completed"] = True
        return {"id": task["id"], "content": task["content"], "is_completed": True}

    def _update_task(self, task_id: str, due_date: str) -> dict[str, Any]:
        task = self._task(task_id)
        try:
            date.fromisoformat(due_date)
        except ValueError:
            raise ToolError(f'"{due_date[:20]}" is not a date YYYY-MM-DD') from None
        task["due_date"] = due_date
        return {"id": task["id"], "content": task["content"], "due_date": due_date}

    def _delete(self, task_id: str) -> dict[str, Any]:
        task = self._task(task_id)
        self.state["tasks"].remove(task)
        return {"id": task["id"], "content": task["content"], "deleted": True}
