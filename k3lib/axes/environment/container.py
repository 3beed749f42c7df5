"""The chain's container level: the CUDA the image was built with (not what the driver can run), the image and
its tag against the recipe and the engine, and the build method (official release, development or custom build)."""

from __future__ import annotations

import re

from ...core.versions import public

from ...core.evidence import Finding
from ...core.params import RecipeParams
from .config import OFFICIAL_REPOS
from .rules import Proof, finding, line_of, missing, version_proofs
from .sources import EnvironmentSources
from .values import cuda_major, cuda_major_of_tag, parse_version

_TAG_VERSION_RE = re.compile(r"^v?(?P<v>\d+\.\d+(?:\.\d+)*(?:(?:rc|post|\.post|\.dev|a|b)\d+)*)")


def check_cuda_build(s: EnvironmentSources, recipe: RecipeParams) -> Finding:
    ce = s.collect_env
    want = recipe.cuda_major
    expected = f"CUDA {want}.x build" if want else None
    driver_cuda = (s.nvidia_smi.cuda_version if s.nvidia_smi else None) or \
        (s.nvml.cuda_driver_version if s.nvml and s.nvml.available else None)
    if ce is None:
        why = missing(s, "collect_env")
        if driver_cuda:
            return finding("environment.cuda_build", "not-observable",
                           f"the only CUDA figure is the driver's 'CUDA Version: {driver_cuda}', which says what the "
                           "driver can run, not what the image was built with; attach the container's collect_env "
                           f"report ({why})", observed={"driver can run": driver_cuda}, expected=expected)
        return finding("environment.cuda_build", "not-observable", f"the build's CUDA is not observable ({why})",
                       expected=expected)
    text = s.texts["collect_env"].text
    att = s.attachment("collect_env")
    if ce.platform != "cuda":
        detail = ce.rocm_build and f"ROCm {ce.rocm_build}" or ce.torch_version or ce.platform
        if want is None:
            return finding("environment.cuda_build", "info",
                           f"not a CUDA build: platform {ce.platform} ({detail}); the recipe requires no CUDA "
                           "version, so none is checked",
                           [Proof("collect_env", ce.platform, line_of(text, r"PyTorch version\s*:"), att)],
                           observed=ce.platform)
        return finding("environment.cuda_build", "fail", f"not a CUDA build: platform {ce.platform} ({detail})",
                       [Proof("collect_env", ce.platform, line_of(text, r"PyTorch version\s*:"), att)],
                       observed=ce.platform, expected=expected)
    proofs, majors = _cuda_build_claims(s)
    libs = set(ce.cuda_library_majors)
    build = majors.get("torch build") or (min(libs) if len(libs) == 1 else None)
    observed = {**{k: v for k, v in majors.items()}, "nvidia-*-cuNN wheels": sorted(libs) or None,
                "driver can run": driver_cuda}
    if build is None:
        return finding("environment.cuda_build", "not-observable",
                       "the collect_env report names no CUDA build (no 'CUDA used to build PyTorch', no cuNN wheels)"
                       + (f"; nvidia-smi's CUDA {driver_cuda} is only what the driver can run" if driver_cuda else ""),
                       proofs, observed=observed, expected=expected)
    disagree: dict[str, int | str] = {k: v for k, v in majors.items() if v != build}
    if libs and build not in libs:
        disagree["nvidia-*-cuNN wheels"] = "/".join(map(str, sorted(libs)))
    story = ""
    host_branch = s.nvidia_smi.driver_branch if s.nvidia_smi else (ce.driver_branch or None)
    if driver_cuda and host_branch:
        story = f"; the host driver R{host_branch} can run CUDA {driver_cuda}"
    if disagree:
        said = ", ".join(f"{k} says CUDA {v}" for k, v in disagree.items())
        return finding("environment.cuda_build", "fail",
                       f"the container's CUDA sources disagree: torch was built for CUDA {build}, but {said}{story}",
                       proofs, observed=observed, expected=expected)
    if driver_cuda and (dm := cuda_major(driver_cuda)) is not None and dm < build:
        return finding("environment.cuda_build", "fail",
                       f"the image is a CUDA {build} build but the host driver can run only CUDA {driver_cuda}",
                       proofs, observed=observed, expected=expected)
    if want is None:
        return finding("environment.cuda_build", "info", f"CUDA {build} build{story}; the recipe sets no CUDA major",
                       proofs, observed=observed)
    if build != want:
        return finding("environment.cuda_build", "fail",
                       f"the container is a CUDA {ce.torch_cuda_build or build} build, the recipe needs CUDA {want}"
                       f"{story} — host and container tell different stories",
                       proofs, observed=observed, expected=expected)
    mixed = sorted(libs - {build})
    if mixed:
        return finding("environment.cuda_build", "warn",
                       f"CUDA {build} build, but the image also carries nvidia-*-cu{'/cu'.join(map(str, mixed))} "
                       "wheels (a dependency pulled another CUDA's libraries)", proofs, observed=observed,
                       expected=expected)
    return finding("environment.cuda_build", "pass", f"CUDA {ce.torch_cuda_build or build} build{story}",
                   proofs, observed=observed, expected=expected)


def _cuda_build_claims(s: EnvironmentSources) -> tuple[list[Proof], dict[str, int]]:
    """What each source in the container says of its CUDA build: the proofs shown, and the major each one names."""
    proofs: list[Proof] = []
    majors: dict[str, int] = {}
    ce = s.collect_env
    if ce is None:
        return proofs, majors
    text = s.texts["collect_env"].text
    att = s.attachment("collect_env")
    if ce.torch_cuda_build:
        proofs.append(Proof("collect_env: CUDA used to build PyTorch", ce.torch_cuda_build,
                            line_of(text, r"CUDA used to build PyTorch"), att))
        if (m := cuda_major(ce.torch_cuda_build)) is not None:
            majors["torch build"] = m
    if (m := cuda_major_of_tag(ce.torch_version)) is not None:
        proofs.append(Proof("collect_env: torch wheel tag", ce.torch_version, line_of(text, r"PyTorch version"), att))
        majors.setdefault("torch build", m)
    for major in ce.cuda_library_majors:
        wheels = [p.name for p in ce.cuda_library_packages if p.name.lower().endswith(f"cu{major}")]
        proofs.append(Proof(f"collect_env: nvidia-*-cu{major} wheels", ", ".join(wheels[:4]) + ("…" if len(wheels) > 4 else ""),
                            line_of(text, re.escape(wheels[0])) if wheels else None, att))
    if (m := cuda_major_of_tag(ce.vllm_version)) is not None:
        majors["vLLM wheel tag"] = m
    if s.image and s.image.reference and (m := cuda_major_of_tag(s.image.reference.rpartition(":")[2])) is not None:
        majors["image tag"] = m
        proofs.append(Proof(f"image ({s.image.source})", s.image.reference, None, s.attachment("image_inspect")))
    return proofs, majors


def _repo_and_tag(reference: str) -> tuple[str, str | None]:
    ref = reference.split("@", 1)[0]
    repo, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:  # "host:5000/repo" has a port, not a tag
        return ref, None
    return repo, tag


def _official_repo(repo: str) -> bool:
    path = repo.split("/", 1)[1] if "." in repo.split("/", 1)[0] or ":" in repo.split("/", 1)[0] else repo
    return any(path == r or path.endswith("/" + r) for r in OFFICIAL_REPOS)


def check_image(s: EnvironmentSources, recipe: RecipeParams) -> Finding:
    img = s.image
    expected = recipe.image or None
    if img is None or not img.reference:
        why = missing(s, "image_inspect")
        return finding("environment.image", "not-observable",
                       "the image is not identified: set axes.environment.image_inspect (docker/crictl inspect JSON) "
                       f"or recipe.image and recipe.image_digest ({why})", expected=expected)
    proofs = [Proof(f"image ({img.source})", img.reference, img.digest, s.attachment("image_inspect"))]
    observed = {"image": img.reference, "digest": img.digest, "created": img.created}
    problems = []
    if recipe.image and img.source == "image_inspect" and _norm_ref(recipe.image) != _norm_ref(img.reference):
        problems.append(f"the container runs {img.reference} but the sheet is for {recipe.image}")
    if recipe.image_digest and img.digest and recipe.image_digest != img.digest:
        problems.append(f"digest {img.digest[:19]}… is not the signed {recipe.image_digest[:19]}…")
    repo, tag = _repo_and_tag(img.reference)
    if tag:
        tag_v = _TAG_VERSION_RE.match(tag)
        versions = {str(public(v)) for p in version_proofs(s) if (v := parse_version(p.value))}
        if tag_v and (tv := parse_version(tag_v.group("v"))) and versions and str(public(tv)) not in versions:
            problems.append(f"tag {tag} does not match the engine's vLLM {', '.join(sorted(versions))}")
        if recipe.cuda_major and (m := cuda_major_of_tag(tag)) is not None and m != recipe.cuda_major:
            problems.append(f"tag {tag} is a CUDA {m} image, the recipe needs CUDA {recipe.cuda_major}")
    if problems:
        return finding("environment.image", "fail", "; ".join(problems), proofs, observed=observed, expected=expected)
    if img.source != "image_inspect":
        return finding("environment.image", "not-observable",
                       f"image {img.reference} is only declared in the parameters, never inspected: set "
                       "axes.environment.image_inspect (docker/crictl inspect JSON of the running container) "
                       f"({missing(s, 'image_inspect')})", proofs, observed=observed, expected=expected)
    if not img.digest:
        return finding("environment.image", "not-observable",
                       f"image {img.reference} inspected, but the inspect JSON carries no digest (RepoDigests, "
                       "imageRef): the exact image cannot be archived", proofs, observed=observed,
                       expected=expected)
    return finding("environment.image", "pass",
                   f"image {img.reference}@{img.digest[:19]}… from the container's inspect JSON", proofs,
                   observed=observed, expected=expected)


def _norm_ref(ref: str) -> str:
    ref = ref.split("@", 1)[0]
    for prefix in ("docker.io/library/", "docker.io/", "index.docker.io/"):
        ref = ref.removeprefix(prefix)
    return ref if ":" in ref.rsplit("/", 1)[-1] else ref + ":latest"


def check_build_method(s: EnvironmentSources) -> Finding:
    ce = s.collect_env
    official_hints: list[Proof] = []
    custom_hints: list[Proof] = []
    dev_hints: list[Proof] = []
    if s.image and s.image.reference:
        repo, _ = _repo_and_tag(s.image.reference)
        p = Proof(f"image ({s.image.source})", s.image.reference, None, s.attachment("image_inspect"))
        (official_hints if _official_repo(repo) else custom_hints).append(p)
    if ce is not None and (usage := ce.env_dict.get("VLLM_USAGE_SOURCE")):
        p = Proof("collect_env: VLLM_USAGE_SOURCE", usage, line_of(s.texts["collect_env"].text, "VLLM_USAGE_SOURCE"),
                  s.attachment("collect_env"))
        # vLLM's release Dockerfile sets production-docker-image; a source build or another image does not
        (official_hints if usage == "production-docker-image" else custom_hints).append(p)
    for p in version_proofs(s):
        v = parse_version(p.value)
        if v is not None and (v.is_devrelease or (v.local or "").startswith("g")):
            dev_hints.append(p)
    proofs = official_hints + custom_hints + dev_hints
    if s.build == "custom":
        return finding("environment.build_method", "warn",
                       "custom build: an experimental variant, validated on its own sheet with its own rollback; it "
                       "is never declared conforming to the official recipe", proofs, observed="custom",
                       expected="official")
    if custom_hints:
        said = ", ".join(str(p) for p in custom_hints)
        return finding("environment.build_method", "fail",
                       f"declared official, but the evidence says otherwise ({said}): treat it as a custom build "
                       "(recipe.build: custom) on its own sheet", proofs, observed="custom?", expected="official")
    if dev_hints:
        said = ", ".join(f"{p.source} {p.value}" for p in dev_hints[:2])
        return finding("environment.build_method", "warn",
                       f"a development build ({said}): a nightly or source build is not an official release",
                       proofs, observed="development build", expected="official release")
    if not official_hints:
        return finding("environment.build_method", "not-observable",
                       "declared official, but nothing shows which image runs: provide the image inspect JSON or "
                       "the collect_env report", observed="official (declared)", expected="official")
    said = ", ".join(str(p) for p in official_hints)
    return finding("environment.build_method", "pass", f"official build ({said})", proofs, observed="official",
                   expected="official")
