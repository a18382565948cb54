"""Complete a browser sign-in with plain HTTP: the gateway's consent page, then the identity
provider's login and consent forms (oidc-provider's dev interactions and the dev IdP use the
same field names). Returns the query of the final redirect to the client's callback."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx

ACTION = re.compile(r'<form[^>]*action="([^"]+)"')
REQUEST = re.compile(r'name="request" value="([^"]+)"')


async def sign_in(
    url: str, user: str, password: str, callback: str, decision: str = "allow"
) -> dict[str, str]:
    """Follow redirects and submit forms until the browser would land on `callback`."""
    async with httpx.AsyncClient(follow_redirects=False, timeout=20) as browser:
        for _ in range(25):
            if url.startswith(callback):
                return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
            response = await browser.get(url)
            if response.status_code in (301, 302, 303, 307):
                url = urljoin(url, response.headers["location"])
                continue
            if response.status_code != 200:
                raise RuntimeError(
                    f"sign-in stopped at {url}: HTTP {response.status_code} {response.text[:300]}"
                )
            page = response.text
            action = ACTION.search(page)
            if action is None:
                raise RuntimeError(f"no form on {url}: {page[:300]}")
            request_id = REQUEST.search(page)
            if request_id is not None:  # the gateway's consent page
                form = {"request": request_id.group(1), "decision": decision}
            elif 'value="login"' in page:
                form = {"prompt": "login", "login": user, "password": password}
            else:
                form = {"prompt": "consent"}
            target = urljoin(url, action.group(1))
            # What a browser sends with a same-origin form post (the pages' Referrer-Policy
            # is same-origin, so the real origin, not "null").
            page_origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
            headers = {"Origin": page_origin} if target.startswith(page_origin + "/") else {}
            response = await browser.post(target, data=form, headers=headers)
            if response.status_code not in (301, 302, 303, 307):
                raise RuntimeError(
                    f"form on {url} answered HTTP {response.status_code}: {response.text[:300]}"
                )
            url = urljoin(url, response.headers["location"])
    raise RuntimeError("the sign-in did not reach the client's callback")
