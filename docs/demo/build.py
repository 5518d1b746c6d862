"""A small release: build, test and deploy a service, recorded as a durable run.

Run it from this directory:  zuke release --service api --state
"""

from __future__ import annotations

import asyncio

from zuke import Build, Context, LockSettings, parameter, run, target


class Release(Build):
    service = parameter("service to release").required()
    environment = parameter("where to deploy").options("staging", "production").default("staging")
    replicas = parameter("how many replicas").integer().default(2)

    @target
    def compile(self, t):
        return t.description("Build the service image").executes(self._compile)

    def _compile(self, ctx: Context) -> None:
        image = f"{self.service.value}:1.4.{len(self.service.value)}"
        ctx.state.set({"image": image})
        print(f"built {image}")

    @target
    def unit_tests(self, t):
        return t.description("Run the unit tests").depends_on(self.compile).executes(self._tests)

    async def _tests(self) -> None:
        await asyncio.sleep(0.05)
        print("412 tests passed")

    @target
    def lint(self, t):
        return t.description("Lint the sources").executes(lambda: print("lint clean"))

    @target
    def release(self, t):
        return (
            t.description("Deploy the image")
            .depends_on(self.unit_tests, self.lint)
            .lock(self._one_deploy_at_a_time)
            .timeout("5m")
            .executes(self._deploy)
        )

    def _one_deploy_at_a_time(self, s: LockSettings) -> None:
        s.lock_key("deploy", self.service.value, self.environment.value).with_ttl("30m")

    def _deploy(self, ctx: Context) -> None:
        image = ctx.state_of(self.compile).get()["image"]
        assert ctx.lock is not None
        print(f"deploying {image} to {self.environment.value} x{self.replicas.value}")
        print(f"holding {ctx.lock.key} with fence {ctx.lock.fence}")
        ctx.state.set({"deployed": image, "environment": self.environment.value})


if __name__ == "__main__":
    run(Release)
