"""A small release: build, test, deploy to staging, wait for QA, roll out to production.

Production is a fan-out over ``--regions`` (default ``eu-west,us-east``): each
region is deployed under its own lock, then smoke-tested, two at a time.

Run it from this directory::

    zuke release --service api                    # suspends at qa_approval, prints the run id
    zuke resume RUN_ID --signal qa-approved --data '{"by": "qa"}'   # finishes the release
"""

from __future__ import annotations

import asyncio

from zuke import Build, Context, LockSettings, external_signal, parameter, run, target


class Release(Build):
    service = parameter("service to release").required()
    replicas = parameter("how many replicas").integer().default(2)
    regions = parameter("production regions").array().default(["eu-west", "us-east"])

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
    def staging(self, t):
        return (
            t.description("Deploy the image to staging")
            .depends_on(self.unit_tests, self.lint)
            # staging stays this release's until production is out: across the QA gate
            .lock(lambda s: self._one_deploy_at_a_time(s, "staging").held_until(self.release))
            .timeout("5m")
            .executes(lambda ctx: self._deploy(ctx, "staging"))
        )

    @target
    def qa_approval(self, t):
        return (
            t.description("Wait for QA to approve what runs on staging")
            .depends_on(self.staging)
            .waits_for(lambda s: s.on(external_signal("qa-approved")).timeout("72h"))
        )

    @target
    def release(self, t):
        return (
            t.description("Roll the approved image out to production, region by region")
            .depends_on(self.qa_approval)
            .for_each(
                lambda: self.regions.value,
                lambda region, index: {
                    "deploy": target()
                    .lock(lambda s: self._one_deploy_at_a_time(s, f"production-{region}"))
                    .timeout("5m")
                    .executes(lambda ctx: self._deploy(ctx, f"production {region}")),
                    "smoke": target().executes(lambda: print(f"smoke tests green in {region}")),
                },
                lambda s: s.concurrency(2),
            )
        )

    def _one_deploy_at_a_time(self, s: LockSettings, environment: str) -> LockSettings:
        return s.lock_key("deploy", self.service.value, environment).with_ttl("30m")

    def _deploy(self, ctx: Context, environment: str) -> None:
        image = ctx.state_of(self.compile).get()["image"]
        assert ctx.lock is not None
        if environment.startswith("production"):
            approval = ctx.signals["qa-approved"]
            print(f"approved by {approval.data.get('by', '?')} at {approval.received_at}")
        print(f"deploying {image} to {environment} x{self.replicas.value}")
        print(f"holding {ctx.lock.key} with fence {ctx.lock.fence}")
        ctx.state.set({"deployed": image, "environment": environment})


if __name__ == "__main__":
    run(Release)
