"""The architecture of the image a pool's Machines launch: DescribeImages, through its launch template's version
when the template names the image.

An image's architecture never changes: it is kept per process and region for
the life of the process. What a launch template version names is kept for
``TEMPLATE_SECONDS`` (``$Default`` and ``$Latest`` move to new versions). A
read that fails is answered again for ``RETRY_SECONDS``, so an image EC2 does
not know costs a call every few seconds, not one per round, and is read
again once it may exist.
"""
from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError

from hooks.aws.timed_cache import FOREVER, TimedCache
from hooks.plan import error_text

TEMPLATE_SECONDS = 300.0
RETRY_SECONDS = 15.0
# A launch template may name its image as an SSM parameter, resolved by EC2 at launch.
_SSM_PREFIX = "resolve:ssm:"

ARCHITECTURES = TimedCache()  # (region, image id) -> {"architecture"} or {"error"}
TEMPLATE_IMAGES = TimedCache()  # (region, template id, name, version) -> {"id"} or {"error"}


class _Unreadable(Exception):
    """EC2 answered, but not with what is needed."""


def _region(ec2) -> str:
    return ec2.meta.region_name


def _kept(cache: TimedCache, key: tuple, read, seconds: float) -> dict:
    """``read()``'s answer, kept for ``seconds``; a failure, as {"error"}, for ``RETRY_SECONDS``."""
    def attempt():
        try:
            return read(), seconds
        except (ClientError, BotoCoreError, _Unreadable) as exc:
            return {"error": str(exc) if isinstance(exc, _Unreadable) else error_text(exc)}, RETRY_SECONDS
    return cache.get(key, attempt)


def _template_image(ec2, template: dict) -> dict:
    version = template.get("version") or "$Default"
    ask = {"Versions": [version]}
    if template.get("id"):
        ask["LaunchTemplateId"] = template["id"]
    else:
        ask["LaunchTemplateName"] = template.get("name")

    def read():
        found = ec2.describe_launch_template_versions(**ask).get("LaunchTemplateVersions") or []
        image = ((found[0].get("LaunchTemplateData") or {}).get("ImageId") if found else None) or ""
        if not image:
            raise _Unreadable(f"launch template {template.get('id') or template.get('name')} version {version} "
                              "names no image")
        if image.startswith(_SSM_PREFIX):
            raise _Unreadable(f"launch template {template.get('id') or template.get('name')} version {version} "
                              f"names its image through SSM ({image[:120]})")
        return {"id": image}
    return _kept(TEMPLATE_IMAGES, (_region(ec2), template.get("id"), template.get("name"), version), read,
                 TEMPLATE_SECONDS)


def _architecture(ec2, image_id: str) -> dict:
    def read():
        found = ec2.describe_images(ImageIds=[image_id]).get("Images") or []
        architecture = next((i.get("Architecture") for i in found if i.get("ImageId") == image_id), None)
        if not architecture:
            raise _Unreadable(f"EC2 has no image {image_id}")
        return {"architecture": architecture}
    return _kept(ARCHITECTURES, (_region(ec2), image_id), read, FOREVER)


def architecture_of(ec2, image_id: str | None, launch_template: dict | None) -> dict:
    """{"id", "architecture"} (EC2's name: x86_64, arm64, ...) of the image a Machine made from ``image_id`` or
    ``launch_template`` (a Machine spec's) launches, or {"id", "error"} saying why it is not known (``id``
    empty when the template was not read). Never raises."""
    image = image_id or ""
    if not image:
        named = _template_image(ec2, launch_template or {})
        if "error" in named:
            return {"id": "", "error": named["error"]}
        image = named["id"]
    return {"id": image, **_architecture(ec2, image)}
